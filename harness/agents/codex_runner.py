"""Run the pinned Codex CLI once against a run's binding (``codex exec --json``), cancellable.

Owns :class:`CodexRun`: builds the run's private ``CODEX_HOME`` (:mod:`harness.agents.codex_home`), starts
``codex exec`` in its own process group with a minimal environment (``PATH``, ``HOME`` = the private home,
``CODEX_HOME``, the run token in ``HITCH_LOCAL_MODEL_TOKEN``; nothing else of the caller's environment, so
no cloud key and no user config can leak in), keeps its JSONL events, and :meth:`CodexRun.cancel` ends the
whole group (SIGTERM, then SIGKILL). The token is never in argv, in the config or in the event log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.agents.codex_home import TOKEN_ENV, CodexBinding, build_codex_home, check_agent_args
from harness.agents.codex_install import CodexInstall
from harness.errors import HitchError

__all__ = ["CodexOutcome", "CodexRun"]

_BASE_ARGS = (
    "exec",
    "--strict-config",
    "--skip-git-repo-check",
    "--dangerously-bypass-approvals-and-sandbox",
    "--ephemeral",
    "--json",
    "--color",
    "never",
)


@dataclass
class CodexOutcome:
    returncode: int
    events: list[dict[str, Any]]
    cancelled: bool
    stderr_tail: str = field(repr=False, default="")

    @property
    def errors(self) -> list[str]:
        out = []
        for ev in self.events:
            if ev.get("type") == "error":
                out.append(str(ev.get("message", "")))
            elif ev.get("type") == "turn.failed":
                out.append(str((ev.get("error") or {}).get("message", "")))
        return out

    @property
    def completed(self) -> bool:
        return self.returncode == 0 and any(ev.get("type") == "turn.completed" for ev in self.events) and not self.errors

    @property
    def final_message(self) -> str | None:
        texts = [
            str(ev["item"].get("text", ""))
            for ev in self.events
            if ev.get("type") == "item.completed"
            and isinstance(ev.get("item"), dict)
            and ev["item"].get("type") == "agent_message"
        ]
        return texts[-1] if texts else None

    def turn_problem(self) -> str | None:
        """Why this turn did not end with an answer (None when it did): Codex reported a failed turn or an
        error, exited non-zero, never completed the turn, or its final agent message is empty."""
        if self.cancelled:
            return "the run was cancelled"
        if self.errors:
            return f"Codex reported a failed turn: {self.errors[-1][:500]}"
        if self.returncode != 0:
            return f"codex exited with {self.returncode}"
        if not any(ev.get("type") == "turn.completed" for ev in self.events):
            return "no turn.completed event"
        answer = self.final_message
        if answer is None or not answer.strip():
            return "the turn completed with an empty answer (no agent message text)"
        return None

    def commands(self) -> list[dict[str, Any]]:
        return [
            ev["item"]
            for ev in self.events
            if ev.get("type") == "item.completed"
            and isinstance(ev.get("item"), dict)
            and ev["item"].get("type") == "command_execution"
        ]

    def raise_for_failure(self) -> None:
        if self.cancelled:
            raise HitchError("harness_run_failed", "the Codex run was cancelled", {"cancelled": True})
        if not self.completed:
            message = self.errors[-1] if self.errors else f"codex exited with {self.returncode}"
            raise HitchError("harness_run_failed", f"Codex failed: {message[:500]}", {"returncode": self.returncode})


class CodexRun:
    """One ``codex exec`` process; :meth:`start`, then :meth:`wait` (or :meth:`cancel`)."""

    def __init__(
        self,
        install: CodexInstall,
        binding: CodexBinding,
        token: str,
        *,
        home: Path,
        workdir: Path,
        prompt: str,
        agent_args: Sequence[str] = (),
        events_path: Path | None = None,
    ) -> None:
        self.extra = check_agent_args(agent_args)
        if not token:
            raise HitchError("inference_token_invalid", "the run token is empty", {})
        self.install = install
        self.home = build_codex_home(home, binding)
        self.workdir = workdir
        self.prompt = prompt
        self.events_path = events_path or home.parent / "codex-events.jsonl"
        self._token = token
        self._proc: subprocess.Popen[bytes] | None = None
        self._cancelled = threading.Event()
        self._events: list[dict[str, Any]] = []
        self._reader: threading.Thread | None = None

    def argv(self) -> list[str]:
        return [str(self.install.binary), *_BASE_ARGS, "-C", str(self.workdir), *self.extra, self.prompt]

    def env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "CODEX_HOME": str(self.home),
            "LANG": "C.UTF-8",
            TOKEN_ENV: self._token,
        }

    def start(self) -> None:
        stderr = (self.home / "codex-stderr.log").open("wb")
        try:
            self._proc = subprocess.Popen(
                self.argv(),
                cwd=self.workdir,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
            )
        finally:
            stderr.close()
        assert self._proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        self.events_path.parent.mkdir(parents=True, exist_ok=True)
        with self.events_path.open("ab") as log:
            for line in stream:
                log.write(line)
                log.flush()
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict):
                        self._events.append(event)

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self._events)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def cancel(self, grace_s: float = 5.0) -> None:
        """End the whole process group (the agent and every command it started)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self._cancelled.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(grace_s)

    def wait(self, timeout_s: float = 900.0) -> CodexOutcome:
        proc = self._proc
        if proc is None:
            raise HitchError("internal_error", "CodexRun.wait before start", {})
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.cancel()
            rc = proc.wait()
        if self._reader is not None:
            self._reader.join(10)
        if proc.stdout is not None:
            proc.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of commands the agent started
        tail = ""
        with contextlib.suppress(OSError):
            tail = (self.home / "codex-stderr.log").read_text(encoding="utf-8", errors="replace")[-4000:]
        return CodexOutcome(rc, self.events, self._cancelled.is_set(), tail)

    def run(self, timeout_s: float = 900.0) -> CodexOutcome:
        self.start()
        return self.wait(timeout_s)
