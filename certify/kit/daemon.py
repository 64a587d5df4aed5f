"""A private daemon for the destructive certification checks (faults, lifecycle), never the session's one.

:class:`PrivateDaemon`: its own HITCH_ROOT under pytest's tmp dir and its own daemon (short idle TTL, fast
monitor) serving the session's model (``fixture:tiny``) with the session's engine and runtime (an installed
python-env runtime is linked from the session's root, not reinstalled). Runs are made through the same
``POST /v1/runs`` as the session's; a check may SIGKILL the engine or the daemon and restart it. One per
test process and engine (:func:`private_daemon_fixture`), shared by the faults and lifecycle modules so a
real engine is started as few times as possible; stopped at the end of the session, then every process
still naming the private root (and its descendants) is killed by PID.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from certify.session import CertifyEnv, RunHandle, create_run
from certify.timeline import span
from fixtures.engine_faults import EngineTarget
from fixtures.fake_sglang.client import FakeControl
from harness.app.daemon_client import DaemonClient, reap_spawned, start_daemon, stop_daemon
from harness.app.service import engine_endpoint
from harness.contracts.events import LifecycleEventV1
from harness.contracts.lock import InferenceLockV1, compute_inference_id
from harness.contracts.service import InferenceServiceRecordV1
from harness.errors import HitchError
from harness.lock import load_sealed_lock
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir, write_secret
from harness.runtimes import get_runtime
from harness.runtimes.install import runtime_dir
from harness.service.state_store import ServiceStateStore
from harness.store import import_model, model_files_dir

__all__ = ["PRIVATE_TTL_MS", "PrivateDaemon", "private_daemon_fixture"]

PRIVATE_TTL_MS = 3000
_REGISTRY: dict[str, PrivateDaemon] = {}
_REGISTRY_MUTEX = threading.Lock()


@dataclass
class PrivateDaemon:
    """A daemon of a private root serving the session's model; see the module docstring."""

    root: HitchRoot
    engine: str
    body: dict[str, Any]
    ttl_ms: int
    fake: FakeControl | None
    args: list[str]
    runs: dict[str, RunHandle] = field(default_factory=dict)
    pids_seen: set[int] = field(default_factory=set)
    shared: dict[str, Any] = field(default_factory=dict)  # state handed between checks (e.g. a warm run)

    @property
    def gateway_dir(self) -> Path:
        return self.root.gateway_dir

    def client(self) -> DaemonClient:
        return DaemonClient(self.root, timeout_s=60.0)

    def start(self) -> dict[str, Any]:
        with span("private daemon start", engine="private"):
            status = start_daemon(self.root, self.args, timeout_s=180.0)
        self.pids_seen.add(int(status["pid"]))
        return status

    def daemon_pid(self) -> int:
        return int(self.client().status()["pid"])

    def create_run(self, run_id: str | None = None, extra_flags: tuple[str, ...] = (), **body: Any) -> RunHandle:
        payload = {**self.body, **body, "run_id": run_id or "priv-" + secrets.token_hex(5)}
        if extra_flags:
            payload["fake_flags"] = [*payload.get("fake_flags", []), *extra_flags]
        with span("private run (engine start when none is warm)", engine="private"):
            run = create_run(self.client(), payload)
        self.runs[run.run_id] = run
        pid = self.engine_pid(run.service_id)
        if pid is not None:
            self.pids_seen.add(pid)
        return run

    def delete_run(self, run: RunHandle) -> dict[str, Any]:
        self.runs.pop(run.run_id, None)
        return self.client().delete_run(run.run_id)

    def stop_service(self, service_id: str) -> None:
        for run in [r for r in self.runs.values() if r.service_id == service_id]:
            with contextlib.suppress(Exception):
                self.delete_run(run)
        with contextlib.suppress(HitchError):
            self.client().stop_service(service_id, force=True)

    def record(self, service_id: str) -> InferenceServiceRecordV1 | None:
        return ServiceStateStore(self.root, service_id).read()

    def events(self, service_id: str) -> list[LifecycleEventV1]:
        return list(ServiceStateStore(self.root, service_id).events())

    def engine_pid(self, service_id: str) -> int | None:
        record = self.record(service_id)
        if record is None or record.process is None or record.process.pid is None:
            return None
        return int(record.process.pid)

    def engine_target(self, service_id: str) -> EngineTarget | None:
        """The service's engine as a fault acts on it (process group or container), once its record names one."""
        record = self.record(service_id)
        process = None if record is None else record.process
        if process is None or (process.pid is None and process.container_id is None):
            return None
        return EngineTarget(process)

    def engine_endpoint(self, service_id: str) -> tuple[str, dict[str, str]]:
        url, key = engine_endpoint(self.root, service_id)
        return url, {"Authorization": f"Bearer {key}"}

    def seal_variant(self, lock: InferenceLockV1, **sections: dict[str, Any]) -> InferenceLockV1:
        """Store a variant of a sealed lock (other execution/resources values, its own id) in this root."""
        data = lock.to_json_dict()
        for name, update in sections.items():
            data[name].update(update)
        data.pop("inference_id", None)
        data["inference_id"] = compute_inference_id(data)
        variant = InferenceLockV1.model_validate(data)
        folder = self.root.digest_dir(self.root.sealed_locks, variant.inference_id)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / "lock.json", variant.to_json_dict())
        return variant

    def sealed_lock(self, inference_id: str) -> InferenceLockV1:
        return load_sealed_lock(self.root, inference_id)

    def close(self) -> list[str]:
        """Stop the daemon (drain, confirmed stops); kill by PID anything of ours still alive. Returns what was killed."""
        with contextlib.suppress(Exception), span("private daemon stop", engine="private"):
            stop_daemon(self.root, timeout_s=60)
        return _kill_leftovers(str(self.root.path), self.pids_seen, reap_spawned)


def _kill_leftovers(needle: str, known: set[int], reap: Callable[[], None]) -> list[str]:
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if proc.pid != os.getpid() and any(needle in part for part in proc.info["cmdline"] or []):
                found[proc.pid] = proc
    for pid in known:
        with contextlib.suppress(psutil.Error):
            found.setdefault(pid, psutil.Process(pid))
    for proc in list(found.values()):
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
    killed = []
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                killed.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
                proc.send_signal(signal.SIGKILL)
    reap()
    return killed


def _make_private_daemon(env: CertifyEnv, base: Path, ttl_ms: int) -> PrivateDaemon:
    """A private root holding the session's model, runtime and sealed lock (so no ``prepare`` start is paid)."""
    root = HitchRoot(base / "root")
    root.path.mkdir(parents=True, exist_ok=True)
    imported = import_model(root, model_files_dir(env.root, env.model_id), "certify-private")
    manifest = get_runtime(env.runtime_id)
    shared_env = runtime_dir(env.root, manifest)
    if shared_env.is_dir():  # an installed python-env runtime: link it instead of installing it again
        mine = runtime_dir(root, manifest)
        mine.parent.mkdir(parents=True, exist_ok=True)
        if not mine.exists():
            mine.symlink_to(shared_env, target_is_directory=True)
    pins = env.root.runtime_pins
    if pins.is_file():  # an operator-pinned image (hitch runtime pin): the private root resolves the same runtime
        root.runtime_pins.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pins, root.runtime_pins)
    body: dict[str, Any] = {
        "device": env.device,
        "profile": env.options.profile,
        "runtime": env.runtime_id,
        "engine": env.engine,
        "launcher": env.options.launcher or "process",
    }
    if "image" in env.body:  # an oci session: the private daemon runs the same pinned image
        body["image"] = env.body["image"]
    sealed = env.root.digest_dir(env.root.sealed_locks, env.run.inference_id)
    if imported.manifest.model_id == env.model_id and (sealed / "lock.json").is_file():
        # the session's lock was sealed by an engine that verified it: reuse it, the private root needs no prepare
        target = root.digest_dir(root.sealed_locks, env.run.inference_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(sealed, target, dirs_exist_ok=True)
        body["inference_id"] = env.run.inference_id
    else:
        body["model"] = "local/certify-private"
    fake: FakeControl | None = None
    if env.engine == "fake":
        private = ensure_private_dir(root.certify / "private-daemon")
        token_file = private / "fake-control.token"
        write_secret(token_file, secrets.token_urlsafe(24))
        port_file = private / "fake-control.port"
        body["fake_flags"] = FakeControl.launch_flags(port_file, token_file)
        fake = FakeControl(port_file, token_file.read_text().strip())
    args = ["--idle-ttl-ms", str(ttl_ms), "--monitor-interval-s", "0.2", "--stop-timeout-s", "8"]
    daemon = PrivateDaemon(root, env.engine, body, ttl_ms, fake, args)
    daemon.start()
    return daemon


@pytest.fixture(scope="session", name="private_daemon")
def private_daemon_fixture(certify_env: CertifyEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateDaemon]:
    """This process's private daemon for the session's engine, made once and shared by the faults and
    lifecycle modules (each imports this fixture; the registry hands both the same daemon). Stopped at the
    end of the session, then anything of the private root still alive is killed by PID."""
    key = f"{certify_env.engine}:{certify_env.device}"
    with _REGISTRY_MUTEX:
        daemon = _REGISTRY.get(key)
        if daemon is None:
            daemon = _make_private_daemon(certify_env, tmp_path_factory.mktemp("private-daemon"), PRIVATE_TTL_MS)
            _REGISTRY[key] = daemon
    try:
        yield daemon
    finally:
        with _REGISTRY_MUTEX:
            _REGISTRY.pop(key, None)
        daemon.close()
