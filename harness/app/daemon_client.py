"""The way into a root's daemon for the CLI and in-process callers (sync; httpx over the unix socket).

:class:`DaemonClient` has a method per route, each sending its request model (:mod:`harness.app.requests`),
sends the bearer token read from the root's 0600 token file and turns an error answer back into the same
:class:`HitchError`. Its first call that does work is preceded by the handshake
(:mod:`harness.handshake`): a daemon of other code is ``daemon_upgrade_required``, never talked to.
:func:`start_daemon` spawns ``python -m harness.daemon``
detached (new session, output appended to ``inference/daemon/daemon.log``) and returns once it answers;
:func:`stop_daemon` asks it to drain and exit and waits for the process to be gone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import filelock
import httpcore
import httpx
import psutil
from httpcore import NetworkStream
from httpcore._backends.base import SOCKET_OPTION
from httpcore._backends.sync import SyncStream

from harness.app.requests import (
    AcquireRequest,
    EmptyRequest,
    FinishRunRequest,
    PrepareRequest,
    ReleaseRequest,
    Request,
    RunRequest,
    ShutdownRequest,
    StopServiceRequest,
)
from harness.contracts.service import EngineName, LauncherName
from harness.errors import ERROR_TABLE, HitchError
from harness.handshake import HANDSHAKE_EXEMPT, HANDSHAKE_PATH, check_handshake
from harness.paths import DaemonPaths, HitchRoot

__all__ = [
    "EXIT_ALREADY_RUNNING",
    "DaemonClient",
    "daemon_running",
    "ensure_daemon",
    "reap_spawned",
    "start_daemon",
    "stop_daemon",
]

EXIT_ALREADY_RUNNING = 3  # the daemon's exit status when another daemon holds the root's mutex
_LONG_S = 900.0  # prepare of a real engine: install done, model load + probes
# Daemons this process spawned, kept so their Popen is never collected while they run (and can be reaped).
_SPAWNED: dict[int, subprocess.Popen[bytes]] = {}


def _unavailable(paths: DaemonPaths, why: str) -> HitchError:
    return HitchError(
        "daemon_unavailable", f"the hitch daemon of {paths.root.path} is not answering: {why}", {"log": str(paths.log)}
    )


class _UnixBackend(httpcore.SyncBackend):
    """httpcore's sync network backend, except that a unix-socket connect that fails closes its socket: httpcore's
    own leaves it open (a daemon that stopped, or is stopping, refuses the connect; the leaked socket's
    ResourceWarning surfaced later in an unrelated caller and failed a certification's fixture)."""

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SOCKET_OPTION] | None = None
    ) -> NetworkStream:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            for option in socket_options or ():
                sock.setsockopt(*option)
            sock.settimeout(timeout)
            sock.connect(path)
        except TimeoutError as exc:
            sock.close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            sock.close()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        return SyncStream(sock)


def _transport(sock: Path) -> httpx.HTTPTransport:
    """Plain HTTP on the daemon's unix socket (no TLS context to build), through :class:`_UnixBackend`."""
    transport = httpx.HTTPTransport(verify=False)
    transport._pool = httpcore.ConnectionPool(uds=str(sock), network_backend=_UnixBackend())
    return transport


class DaemonClient:
    """Calls the management API of the daemon of ``root``."""

    def __init__(self, root: HitchRoot, timeout_s: float = 60.0) -> None:
        self.root = root
        self.paths = DaemonPaths(root)
        self.timeout_s = timeout_s
        self.handshake: dict[str, Any] | None = None  # the daemon's answer, once accepted

    def _token(self) -> str:
        try:
            return self.paths.token.read_text().strip()
        except OSError:
            raise _unavailable(self.paths, "no daemon token") from None

    def _send(
        self, method: str, path: str, body: Request | dict[str, Any] | None, timeout_s: float | None
    ) -> tuple[httpx.Response, Any]:
        sock = self.paths.socket
        if not sock.exists():
            raise _unavailable(self.paths, "no socket")
        headers = {"Authorization": f"Bearer {self._token()}"}
        try:
            with httpx.Client(
                transport=_transport(sock), base_url="http://hitch-daemon", timeout=timeout_s or self.timeout_s, trust_env=False
            ) as client:
                payload = body.body() if isinstance(body, Request) else body
                resp = client.request(method, path, json=payload, headers=headers)
        except httpx.TransportError as exc:
            raise _unavailable(self.paths, f"{type(exc).__name__}: {exc}") from None
        try:
            return resp, resp.json()
        except ValueError:
            return resp, None

    def _shake(self) -> None:
        resp, data = self._send("GET", HANDSHAKE_PATH, None, 10.0)
        if isinstance(data, dict) and isinstance(data.get("error"), dict) and resp.status_code != 404:
            self._raise(data["error"])  # e.g. a token the daemon refuses: that error, not a version verdict
        check_handshake(str(self.root.path), resp.status_code, data)
        assert isinstance(data, dict)
        self.handshake = data

    @staticmethod
    def _raise(error: dict[str, Any]) -> None:
        code = error.get("code")
        raise HitchError(
            code if isinstance(code, str) and code in ERROR_TABLE else "internal_error",
            str(error.get("message", "")),
            error.get("details") if isinstance(error.get("details"), dict) else {},
        )

    def request(
        self, method: str, path: str, body: Request | dict[str, Any] | None = None, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """One call of the API; ``body`` a request model (sent as :meth:`Request.body`) or, for a test that sends
        what no client would, a raw JSON object."""
        if self.handshake is None and path not in HANDSHAKE_EXEMPT:
            self._shake()
        resp, data = self._send(method, path, body, timeout_s)
        if data is None:
            raise HitchError("internal_error", f"the daemon answered HTTP {resp.status_code} without JSON", {})
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            self._raise(error)
        if not isinstance(data, dict):
            raise HitchError("internal_error", "the daemon answered something else than a JSON object", {})
        return data

    # -- API ----------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return self.request("GET", "/v1/status", timeout_s=10.0)

    def services(self) -> dict[str, Any]:
        return self.request("GET", "/v1/services")

    def acquire(
        self,
        owner: str,
        *,
        inference_id: str | None = None,
        lock: dict[str, Any] | None = None,
        engine: EngineName = "sglang",
        launcher: LauncherName = "process",
        image: str | None = None,
        fake_flags: list[str] | None = None,
        cache_scope_owner: str | None = None,
    ) -> dict[str, Any]:
        ask = AcquireRequest(
            owner=owner,
            inference_id=None if lock is not None else inference_id,
            lock=lock,
            engine=engine,
            launcher=launcher,
            image=image,
            fake_flags=fake_flags or [],
            cache_scope_owner=cache_scope_owner,
        )
        return self.request("POST", "/v1/acquire", ask, timeout_s=_LONG_S)

    def release(self, lease_id: str) -> bool:
        return bool(self.request("POST", "/v1/release", ReleaseRequest(lease_id=lease_id))["released"])

    def stop_service(self, service_id: str, force: bool = False, by: str | None = None) -> bool:
        """Stop a service; ``by`` names the stopping command in the records of the runs a forced stop ends."""
        ask = StopServiceRequest(force=force, by=by)
        answer = self.request("POST", f"/v1/services/{service_id}/stop", ask, timeout_s=_LONG_S)
        return bool(answer["stopped"])

    def unquarantine(self, service_id: str) -> bool:
        return bool(self.request("POST", f"/v1/services/{service_id}/unquarantine", EmptyRequest())["cleared"])

    def prepare(self, ask: PrepareRequest) -> dict[str, Any]:
        return self.request("POST", "/v1/prepare", ask, timeout_s=_LONG_S)

    def create_run(self, ask: RunRequest, timeout_s: float = _LONG_S) -> dict[str, Any]:
        """``POST /v1/runs``: the run's answer (gateway URL, wire model, the *path* of its token file); a run whose
        trial waits its turn for resources answers only then (``timeout_s`` covers that wait)."""
        return self.request("POST", "/v1/runs", ask, timeout_s=timeout_s)

    def run_record(self, run_id: str) -> dict[str, Any]:
        """``GET /v1/runs/{id}``: the run's durable record."""
        return self.request("GET", f"/v1/runs/{run_id}")

    def finish_run(self, run_id: str, finish: FinishRunRequest) -> dict[str, Any]:
        return self.request("POST", f"/v1/runs/{run_id}/finish", finish, timeout_s=120.0)

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/runs/{run_id}/cancel", EmptyRequest())

    def delete_run(self, run_id: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/runs/{run_id}")

    def shutdown(self, force: bool = True, drain_timeout_s: float = 0.0, by: str | None = None) -> None:
        """Ask the daemon to stop; without ``force`` it refuses (``inference_in_use``) while leases stay live."""
        ask = ShutdownRequest(force=force, drain_timeout_s=drain_timeout_s, by=by)
        self.request("POST", "/v1/shutdown", ask, timeout_s=drain_timeout_s + 30.0)

    def progress(self, key: str) -> dict[str, Any]:
        """``GET /v1/progress/{key}``: what the acquire shown under ``key`` (a run id) waits for now."""
        return self.request("GET", f"/v1/progress/{key}", timeout_s=5.0)


def daemon_running(root: HitchRoot) -> dict[str, Any] | None:
    """The daemon's status, or None when no daemon answers for ``root``."""
    try:
        return DaemonClient(root).status()
    except HitchError as err:
        if err.code == "daemon_unavailable":
            return None
        raise


def _spawn(paths: DaemonPaths, args: list[str]) -> subprocess.Popen[bytes]:
    paths.ensure()
    fd = os.open(paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.daemon", "--root", str(paths.root.path), *args],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
            cwd=str(paths.dir),
        )
    finally:
        os.close(fd)
    _SPAWNED[proc.pid] = proc
    return proc


def reap_spawned() -> None:
    """Collect the exit status of spawned daemons that have ended (no zombie stays behind)."""
    for pid, proc in list(_SPAWNED.items()):
        if proc.poll() is not None:
            del _SPAWNED[pid]


def _mutex_free(paths: DaemonPaths) -> bool:
    """True when no process holds the root's daemon mutex (checked by taking and releasing it at once)."""
    mutex = filelock.FileLock(str(paths.mutex), timeout=0)
    try:
        mutex.acquire()
    except filelock.Timeout:
        return False
    mutex.release()
    return True


def start_daemon(root: HitchRoot, args: list[str] | None = None, timeout_s: float = 120.0) -> dict[str, Any]:
    """Start the root's daemon unless one answers already; returns its status.

    Two starters at once (the workers of one pytest-xdist session) both spawn a daemon; one takes the root's
    mutex, the other exits ``EXIT_ALREADY_RUNNING``. The loser then waits for the holder to answer (it may
    still be recovering the root's services) and spawns again only once the mutex is free and nobody answers.
    """
    found = daemon_running(root)
    if found is not None:
        return found
    paths = DaemonPaths(root)
    proc: subprocess.Popen[bytes] | None = _spawn(paths, list(args or []))
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = daemon_running(root)
        if found is not None and (proc is None or found.get("pid") == proc.pid):
            return found
        if proc is None:
            if _mutex_free(paths):  # the holder ended without serving: start one again
                proc = _spawn(paths, list(args or []))
        elif (code := proc.poll()) is not None:
            _SPAWNED.pop(proc.pid, None)
            found = daemon_running(root)  # lost a race with another starter: theirs is as good
            if found is not None:
                return found
            if code != EXIT_ALREADY_RUNNING:
                tail = paths.log.read_text(errors="replace")[-1500:] if paths.log.exists() else ""
                raise HitchError("daemon_unavailable", f"the daemon exited at start (code {code})", {"log_tail": tail})
            proc = None  # another daemon holds the mutex and does not answer yet: wait for it
        time.sleep(0.05)
    why = f"not answering {timeout_s:.0f}s after start"
    raise _unavailable(paths, why if proc is not None else why + " (another daemon holds the root's mutex)")


def ensure_daemon(root: HitchRoot) -> DaemonClient:
    """A client of the root's daemon, starting it first when none runs (commands that need one)."""
    start_daemon(root)
    return DaemonClient(root)


def _daemon_pid(paths: DaemonPaths) -> tuple[int, float] | None:
    try:
        info = json.loads(paths.info.read_text())
        return int(info["pid"]), float(info["start_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int, start_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return bool(abs(proc.create_time() - start_time) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def stop_daemon(
    root: HitchRoot, force: bool = True, timeout_s: float = 300.0, drain_timeout_s: float = 0.0, by: str | None = None
) -> bool:
    """Stop the root's daemon; True once its process is gone, False when none was running. Without ``force`` the
    daemon refuses while leases are live (after waiting ``drain_timeout_s`` for them): ``inference_in_use``."""
    paths = DaemonPaths(root)
    ident = _daemon_pid(paths)
    if daemon_running(root) is None:
        return False
    DaemonClient(root).shutdown(force=force, drain_timeout_s=drain_timeout_s, by=by)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        reap_spawned()
        if ident is not None and not _alive(*ident):
            return True
        if ident is None and not paths.socket.exists():
            return True
        time.sleep(0.05)
    raise HitchError("daemon_unavailable", "the daemon did not exit after shutdown", {"log": str(paths.log)})
