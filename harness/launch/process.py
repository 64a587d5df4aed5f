"""The ``process`` launcher: the engine as a local process group (DESIGN §4, spec §9.1 step 4).

- ``argv`` is executed directly (no shell) with exactly ``spec.env`` (nothing of ours is added), in a new
  session, so the engine and every process it forks (real SGLang: main, ``sglang::scheduler``,
  ``sglang::detokenizer``) share one process group we can signal as a whole.
- Identity is PID + ``psutil`` create time; :func:`is_our_process` refuses a PID that now belongs to another
  process (a reused PID), so recovery never signals something that is not ours.
- stdout and stderr go through a pump into ``spec.log_path`` (0600). The pump redacts each line with
  :class:`harness.engine.redaction.LineRedactor` (the secrets of ``spec.secret_files`` and secret-named
  values) before a byte reaches the disk: real SGLang logs its resolved ``server_args`` (with ``api_key``)
  at INFO level. If the supervisor dies the pipe breaks and the engine's later log writes fail; the engine
  keeps serving until recovery stops it.
- ``stop`` = SIGTERM to the leader (the engine stops its own children), wait up to the timeout for the
  whole group, then SIGKILL the group; it returns only when the leader is reaped and no live member of the
  group (nor any descendant seen before the stop) remains.
  ``poll`` never reports an OOM: a plain process exit cannot be attributed to the OOM killer with certainty.
- ``spec.cpu_cores`` (a CPU lock) pins the engine to those cores before it execs (``sched_setaffinity`` in the
  child), so its threads stay on the leased cores of one NUMA node.
- Not done here (recorded limitations, spec §11.2): no memory limit (this machine has cgroup v1 only, and no
  cgroup v2 delegation; SGLang sizes a CPU pool from host memory and reads only v2 limits, so a v1 limit would
  kill the engine rather than bound the pool prepare seals: the lock's budget is stated in the evidence), no
  network namespace (the engine must answer the gateway on the host's loopback; the certification check
  ``security.network.engine_offline`` proves the engine serves with no route out).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import psutil

from harness.contracts.service import ProcessIdentityV1
from harness.engine.launch_spec import ExitInfo, LaunchSpec
from harness.engine.redaction import LineRedactor, secret_values
from harness.errors import HitchError

__all__ = [
    "ProcessEngine",
    "ProcessLauncher",
    "is_our_process",
    "isolation_facts",
    "live_group_members",
    "secret_values",
]

_PUMP_CHUNK = 65536
_CONFIRM_S = 10.0
# psutil derives create_time from boot time, which the kernel may report one second apart after a clock step;
# a PID reused within that second of the original's start is not plausible.
_START_TIME_TOLERANCE_S = 1.0


def is_our_process(identity: ProcessIdentityV1) -> bool:
    """True only if ``identity.pid`` is alive (not a zombie) and started at ``identity.start_time``."""
    if identity.pid is None or identity.start_time is None:
        return False
    try:
        proc = psutil.Process(identity.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = float(proc.create_time())
        return abs(started - identity.start_time) < _START_TIME_TOLERANCE_S
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def live_group_members(pgid: int) -> list[int]:
    """PIDs of non-zombie processes in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members: list[int] = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


class _LogPump:
    """Copies the engine's output into the log file, redacting secrets line by line."""

    def __init__(self, stream: asyncio.StreamReader, path: Path, secrets: list[str]) -> None:
        self._stream = stream
        self._redactor = LineRedactor(secrets)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)
        self._file = os.fdopen(fd, "ab", buffering=0)
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            while True:
                chunk = await self._stream.read(_PUMP_CHUNK)
                if not chunk:
                    break
                self._file.write(self._redactor.feed(chunk))
            self._file.write(self._redactor.finish())
        finally:
            self._file.close()


class ProcessEngine:
    """One launched engine process group (implements ``LaunchedEngine``)."""

    def __init__(self, spec: LaunchSpec, proc: asyncio.subprocess.Process, identity: ProcessIdentityV1, pump: _LogPump):
        self.spec = spec
        self.identity = identity
        self._proc = proc
        self._pump = pump
        self._stopped: ExitInfo | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.spec.host}:{self.spec.port}"

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _exit_info(self, returncode: int) -> ExitInfo:
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            return ExitInfo(exit_code=returncode, oom=False, reason=f"killed by {name}")
        return ExitInfo(exit_code=returncode, oom=False, reason=f"exited with code {returncode}")

    async def poll(self) -> ExitInfo | None:
        if self._proc.returncode is None:
            return None
        return self._exit_info(self._proc.returncode)

    def _descendants(self) -> list[psutil.Process]:
        try:
            return list(psutil.Process(self._proc.pid).children(recursive=True))
        except psutil.Error:
            return []

    async def stop(self, timeout_s: float) -> ExitInfo:
        """SIGTERM the leader, wait ``timeout_s`` for the group, SIGKILL the group; returns once nothing is left."""
        if self._stopped is not None:
            return self._stopped
        pgid = self._proc.pid
        seen = self._descendants()
        if self._proc.returncode is None:
            # SIGTERM goes to the leader only: SGLang's main process drains and stops its scheduler and
            # detokenizer itself, whereas a SIGTERM to the whole group kills the scheduler first and sends
            # SGLang down its crash path (SIGQUIT, kill_process_tree). SIGKILL later hits the whole group.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + max(0.0, timeout_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), timeout=max(0.0, timeout_s))
        # The leader may be gone while its children still drain: give them the rest of the grace period.
        while live_group_members(pgid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        escalated = bool(live_group_members(pgid)) or any(_alive(p) for p in seen)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        for child in seen:  # a descendant that left the group (setsid) is still ours
            with contextlib.suppress(psutil.Error):
                child.kill()
        returncode = await asyncio.wait_for(self._proc.wait(), timeout=_CONFIRM_S)
        await self._confirm_gone(pgid, seen)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._pump.task), timeout=_CONFIRM_S)
        self._stopped = dataclasses.replace(self._exit_info(returncode), escalated=escalated)
        return self._stopped

    async def _confirm_gone(self, pgid: int, seen: list[psutil.Process]) -> None:
        end = time.monotonic() + _CONFIRM_S
        while time.monotonic() < end:
            left = live_group_members(pgid) + [p.pid for p in seen if _alive(p)]
            if not left:
                return
            await asyncio.sleep(0.05)
        raise HitchError(
            "inference_recovery_ambiguous",
            "engine processes survived SIGKILL",
            {"pgid": pgid, "pids": live_group_members(pgid)},
        )


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running()) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def isolation_facts(cpu_cores: list[int], stated_memory_bytes: int | None = None) -> dict[str, Any]:
    """What this launcher isolates and what it does not (spec §11.2): written into each run's evidence."""
    cgroup2 = Path("/sys/fs/cgroup/cgroup.controllers").is_file()
    return {
        "launcher": "process",
        "cpu_affinity": list(cpu_cores),
        "offline_env": ["HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1"],
        "memory_limit_bytes": None,
        "memory_limit_stated_bytes": stated_memory_bytes,
        "memory_limit_limitation": "not enforced: "
        + (
            "cgroup v2 is mounted but the launcher does not create a cgroup yet"
            if cgroup2
            # SGLang sizes a CPU pool from host free memory and reads only cgroup v2 limits: a v1 limit would
            # kill the engine instead of bounding the pool it seals, so the lock's budget is stated, not enforced.
            else "this machine has no cgroup v2 (SGLang sizes its pool from host memory and ignores v1 limits); "
            "the lock's memory budget is stated"
        ),
        "network": "host",
        "network_limitation": "no network namespace: the engine must answer the gateway on the host loopback "
        "(certification check security.network.engine_offline proves it serves in a namespace with loopback only)",
    }


def _pin(cores: tuple[int, ...]) -> Callable[[], None] | None:
    """Set the child's CPU affinity before it execs: every thread the engine starts inherits it."""
    if not cores:
        return None
    wanted = set(cores)

    def pin() -> None:
        os.sched_setaffinity(0, wanted)

    return pin


class ProcessLauncher:
    """Starts engines as local process groups (implements ``Launcher``)."""

    kind: Literal["process"] = "process"

    def __init__(self, cwd: Path | None = None) -> None:
        self._cwd = cwd

    async def start(self, spec: LaunchSpec) -> ProcessEngine:
        cwd = self._cwd or spec.log_path.parent
        cwd.mkdir(parents=True, exist_ok=True)
        try:
            proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                env=dict(spec.env),
                cwd=str(cwd),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_pin(spec.cpu_cores),
            )
        except OSError as exc:
            raise HitchError(
                "inference_runtime_unavailable",
                f"cannot execute the engine: {exc.strerror or exc}",
                {"executable": spec.argv[0] if spec.argv else None},
            ) from exc
        assert proc.stdout is not None
        pump = _LogPump(proc.stdout, spec.log_path, secret_values(spec.secret_files))
        try:
            start_time = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            start_time = None  # it died already; poll() reports the exit
        identity = ProcessIdentityV1(launcher="process", pid=proc.pid, start_time=start_time)
        return ProcessEngine(spec, proc, identity, pump)
