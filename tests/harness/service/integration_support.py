"""Support for the service integration tests: real engine processes/containers, and a leak guard.

:class:`LeakGuard` (fixture ``leak_guard`` in each integration module) records this process's children
before a test; afterwards every new child, every process whose command line names the test's tmp dir
(engines reparented after a daemon SIGKILL) and every container labelled with a registered root must be
gone. Whatever is left is killed by PID (only what the test started) and the test fails.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from harness.contracts.lock import InferenceLockV1
from harness.paths import HitchRoot
from harness.service.gpu_leases import GpuLeases
from harness.service.ledger import Capacity, ResourceLedger
from harness.service.manager import ServiceManager
from harness.service.starter import LeaseHandle
from harness.service.starter_supervisor import EngineChoice, SupervisedService, SupervisorStarter

BIG = Capacity(cpu_cores=1024, memory_bytes=1 << 50, gpu_count=8, disk_bytes=1 << 50)
SETTLE_S = 20.0


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _naming(needle: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if proc.pid != os.getpid() and any(needle in part for part in proc.info["cmdline"] or []):
                found.append(proc)
    return found


@dataclass
class LeakGuard:
    tmp_path: Path
    before: set[int] = field(default_factory=set)
    roots: list[Path] = field(default_factory=list)
    docker: Any = None

    def start(self) -> None:
        self.before = {p.pid for p in psutil.Process().children(recursive=True)}

    def watch_root(self, root: Path) -> None:
        self.roots.append(root)

    def leftovers(self) -> list[psutil.Process]:
        procs = {p.pid: p for p in psutil.Process().children(recursive=True) if p.pid not in self.before}
        procs.update({p.pid: p for p in _naming(str(self.tmp_path))})
        return [p for p in procs.values() if _alive(p)]

    def containers(self) -> list[str]:
        if self.docker is None or not self.roots:
            return []
        from harness.launch.oci_config import LABEL_ROOT, root_label

        names = []
        for root in self.roots:
            found = self.docker.containers.list(all=True, filters={"label": f"{LABEL_ROOT}={root_label(root)}"})
            names += [c.name for c in found]
        return names

    def check(self) -> None:
        from harness.app.daemon_client import reap_spawned

        end = time.monotonic() + SETTLE_S
        left = self.leftovers()
        while left and time.monotonic() < end:
            reap_spawned()
            time.sleep(0.1)
            left = self.leftovers()
        described = []
        for proc in left:
            with contextlib.suppress(psutil.Error):
                described.append(f"{proc.pid} {' '.join(proc.cmdline())[:160]}")
                proc.send_signal(signal.SIGKILL)
        containers = self.containers()
        if containers and self.docker is not None:
            from harness.launch.oci import remove_owned

            for root in self.roots:
                remove_owned(root, timeout_s=0, client=self.docker)
        assert not described, f"processes left behind: {described}"
        assert not containers, f"containers left behind: {containers}"


def leak_guard_for(tmp_path: Path) -> Iterator[LeakGuard]:
    guard = LeakGuard(tmp_path)
    guard.start()
    yield guard
    guard.check()


def fake_manager(
    root: HitchRoot,
    choice: EngineChoice | None = None,
    *,
    idle_ttl_ms: int | None = 60_000,
    gpu_leases: GpuLeases | None = None,
    capacity: Capacity = BIG,
    startup_timeout_s: float | None = 60.0,
    port_picker: Any = None,
) -> tuple[ServiceManager, SupervisorStarter]:
    """A real manager + supervisor starter running the fake engine (process launcher by default)."""
    picked = choice or EngineChoice(engine="fake")
    starter = SupervisorStarter(
        root,
        lambda _lock: picked,
        owner="test-daemon",
        monitor_interval_s=0.2,
        startup_timeout_s=startup_timeout_s,
        stop_timeout_s=10.0,
        port_picker=port_picker,
    )
    manager = ServiceManager(root, starter, ResourceLedger(capacity), gpu_leases, idle_ttl_ms=idle_ttl_ms)
    return manager, starter


@contextlib.asynccontextmanager
async def supervised_lease(
    manager: ServiceManager, lock: InferenceLockV1
) -> AsyncIterator[tuple[LeaseHandle, SupervisedService]]:
    """A lease for ``run-1`` on the supervised service for ``lock``; released, and the manager closed, however the
    body ends."""
    lease = await manager.acquire(lock, "run-1")
    try:
        assert isinstance(lease.service, SupervisedService)
        yield lease, lease.service
    finally:
        await manager.release(lease.lease_id)
        await manager.close()


def engine_pid(starter: SupervisorStarter, service_id: str) -> int:
    engine = starter.supervisors[service_id].engine
    assert engine is not None and engine.identity.pid is not None
    return engine.identity.pid


def lock_variant(lock: InferenceLockV1, **execution: Any) -> InferenceLockV1:
    """``lock`` with other execution values and its recomputed id (a genuinely different lock)."""
    from harness.contracts.lock import compute_inference_id

    data = lock.to_json_dict()
    data["execution"].update(execution)
    data.pop("inference_id", None)
    data["inference_id"] = compute_inference_id(data)
    return InferenceLockV1.model_validate(data)


class RecordingServer:
    """An unknown HTTP server on a port: answers 200 to everything and records every request line."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[str] = []
        recorded = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                recorded.append(f"{self.command} {self.path}")
                body = b'{"status": "ok"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _answer
            do_POST = _answer

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
