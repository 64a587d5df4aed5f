"""A wait a person can see: the phases of a service start, shown on stderr while a command waits for it.

A command that waits for the daemon (``hitch local serve``, ``hitch run``, ``hitch local prepare``, a Harbor
evaluation's first trial, certify's session) names the wait with a key (its run id; prepare's own key) and
:func:`watch` polls ``GET /v1/progress/{key}`` from a thread while the blocking call runs. What it shows:

- ``inference.queued``: behind whom (the services holding the resources, their owners, idle or stopping);
- ``inference.preparing`` (a new lock's probe and verified starts) or ``inference.starting`` (the service's own
  start): how long it has been going, what the engine is doing (from its log: loading weights, warming up,
  probing), the engine log's path and its last line;
- ``inference.ready``: the service is ready.

A terminal gets one live line (rewritten in place); a pipe one line per change of phase or step; ``--json`` one
JSON object per change (``{"event": "inference.starting", ...}``), all on stderr, so stdout keeps the command's
own answer. A daemon that cannot answer the poll changes nothing: the poll is silent, the command goes on.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from harness.app.daemon_client import DaemonClient
from harness.errors import HitchError
from harness.paths import HitchRoot

__all__ = ["PhaseShower", "describe", "watch"]

_EVENTS = {"queued": "inference.queued", "starting": "inference.starting", "ready": "inference.ready"}
_STAGES = {"probe": "the probe start of a new lock", "verify": "the verified start of the sealed lock"}


def _behind(rows: list[dict[str, Any]]) -> str:
    parts = []
    for row in rows:
        sid = row.get("service_id")
        if sid is None:
            parts.append(str(row.get("holder")))
            continue
        owners = row.get("owners") or []
        held = f" held by {', '.join(owners)}" if owners else ""
        parts.append(f"{sid} ({row.get('state')}{held})")
    return "; ".join(parts) or "resources being freed"


def describe(state: dict[str, Any]) -> str:
    """One human line for a progress answer (``phase`` not None)."""
    phase = state.get("phase")
    sid = state.get("service_id", "?")
    stage = _STAGES.get(str(state.get("stage")), f"service {sid}")
    if phase == "queued":
        if state.get("waiting_for") == "resources":
            return f"queued: {stage} waits for CPU/RAM held by {_behind(state.get('behind') or [])}"
        return f"queued: {stage} waits for {state.get('waiting_for')}"
    if phase == "starting":
        elapsed = state.get("elapsed_s")
        took = f" {elapsed:.0f} s" if isinstance(elapsed, int | float) else ""
        line = f"starting {stage}:{took}, {state.get('step')}"
        last = state.get("last_log_line")
        if last:
            line += f" | {last}"
        return line
    if phase == "ready":
        return f"ready: service {sid} epoch {state.get('epoch')}"
    return str(phase)


class PhaseShower:
    """Renders progress answers on one stream: a live line (terminal), a line per change (pipe) or JSON lines."""

    def __init__(self, out: IO[str], as_json: bool) -> None:
        self.out = out
        self.as_json = as_json
        self.live = not as_json and out.isatty()
        self.seen: tuple[Any, ...] | None = None
        self.logs: set[str] = set()
        self.width = 0

    def show(self, state: dict[str, Any]) -> None:
        phase = state.get("phase")
        if phase is None or (phase == "ready" and self.seen is None):
            return  # nothing waited: a warm service says nothing
        mark = (phase, state.get("stage"), state.get("service_id"), state.get("step"))
        if self.as_json:
            if mark != self.seen:
                name = _EVENTS.get(str(phase), str(phase))
                if phase == "starting" and state.get("stage") in _STAGES:  # a lock's first use: its one-time setup
                    name = "inference.preparing"
                event = {"event": name, **state}
                self.out.write(json.dumps(event, sort_keys=True) + "\n")
        elif self.live:
            line = describe(state)[:160]
            self.out.write("\r" + line.ljust(self.width))
            self.width = len(line)
        elif mark != self.seen:
            self.out.write(describe(state) + "\n")
        log = state.get("engine_log")
        if not self.as_json and isinstance(log, str) and log not in self.logs:
            self.logs.add(log)
            self.out.write(("\n" if self.live else "") + f"engine log: {log}\n")
            self.width = 0
        self.seen = mark
        self.out.flush()

    def close(self) -> None:
        if self.live and self.width:
            self.out.write("\n")
            self.out.flush()


@contextlib.contextmanager
def watch(
    root: HitchRoot, key: str, *, as_json: bool = False, out: IO[str] | None = None, interval_s: float = 0.5
) -> Iterator[None]:
    """Show the progress of the wait named ``key`` on ``out`` (stderr) until the ``with`` block ends."""
    shower = PhaseShower(out if out is not None else sys.stderr, as_json)
    stop = threading.Event()

    def poll() -> None:
        client: DaemonClient | None = None
        while not stop.wait(interval_s):
            try:
                client = client or DaemonClient(root)
                state = client.progress(key)
            except (HitchError, OSError):
                continue  # the daemon is busy starting or has no such route yet: the command itself decides
            if not stop.is_set():
                shower.show(state)

    thread = threading.Thread(target=poll, name=f"progress-{key}", daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5.0)
        if time.monotonic() - started > interval_s:
            shower.close()
