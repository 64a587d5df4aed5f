"""Private engines for the destructive certification checks (faults, lifecycle), never the session's one.

- :class:`PrivateDaemon`: its own HITCH_ROOT under pytest's tmp dir and its own daemon (short idle TTL, fast
  monitor) serving the session's model (``fixture:tiny``) with the session's engine and runtime (an installed
  python-env runtime is linked from the session's root, not reinstalled). Runs are made through the same
  ``POST /v1/runs`` as the session's; a check may SIGKILL the engine or the daemon and restart it. One per
  test process and engine (:func:`private_daemon`), shared by the faults and lifecycle modules so a real
  engine is started as few times as possible; stopped at the end of the session, then every process still
  naming the private root (and its descendants) is killed by PID.
- :class:`PrivateStack`: one fake engine process plus one in-process gateway on its own loop thread, with a
  lock and gateway config chosen by the check (short request timeout, small response cap).
- Helpers: :func:`engine_running` (``/v1/loads``, the same on SGLang and the fake), :func:`evidence_rows`
  (a gateway's per-request evidence file), :class:`RawStream` (an HTTP/1.1 stream on a plain socket, so a
  check can close it mid-stream and see whether the chunked body ended cleanly), :func:`wait_until`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from certify.session import CertifyEnv, RunHandle
from fixtures.engine_faults import EngineTarget
from fixtures.fake_sglang.client import FakeControl, FakeEngineProcess, start_fake_engine
from gateway.testing import GatewayThread
from harness.contracts.lock import InferenceLockV1, compute_inference_id
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir, write_secret

__all__ = [
    "PrivateDaemon",
    "PrivateStack",
    "RawStream",
    "bind_upstream",
    "close_held_stream",
    "engine_running",
    "hold_stream",
    "evidence_rows",
    "kill_pid",
    "pid_alive",
    "private_daemon_fixture",
    "queue_counts",
    "session_lock",
    "slot_freed_ms",
    "wait_until",
]

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
PRIVATE_TTL_MS = 3000
_REGISTRY: dict[str, PrivateDaemon] = {}
_REGISTRY_LOCK = threading.Lock()


# -- small helpers ------------------------------------------------------------------------------------


def wait_until(probe: Callable[[], T | None], timeout_s: float, interval_s: float = 0.02, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; fail the check after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s:.1f}s waiting for {what}")
        time.sleep(interval_s)


def pid_alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def kill_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def engine_running(engine_url: str, headers: dict[str, str]) -> int:
    """Requests running or waiting in the engine (``GET /v1/loads``; SGLang and the fake answer alike)."""
    r = httpx.get(engine_url + "/v1/loads", headers=headers, timeout=10)
    r.raise_for_status()
    return sum(int(x.get("num_running_reqs", 0)) + int(x.get("num_waiting_reqs", 0)) for x in r.json()["loads"])


def slot_freed_ms(engine_url: str, headers: dict[str, str], model: str, t_close: float, max_running: int) -> float:
    """Milliseconds from ``t_close`` until the engine has a free slot again.

    With one running slot (the baseline lock) a one-token request sent straight to the engine is the proof:
    it can only be answered once the cancelled request has left the engine (a request that kept running
    would hold the slot for its whole remaining budget). With more slots, ``/v1/loads`` must drop to 0
    (SGLang's load snapshot can lag; the fake's is exact)."""
    if max_running == 1:
        body = chat_body(model, stream=False, max_tokens=1)
        r = httpx.post(engine_url + "/v1/chat/completions", json=body, headers=headers, timeout=120)
        assert r.status_code == 200, r.text[:300]
    else:
        wait_until(lambda: engine_running(engine_url, headers) == 0, 60.0, interval_s=0.005, what="the engine slot freed")
    return (time.monotonic() - t_close) * 1000


def close_held_stream(env: CertifyEnv, run: RunHandle) -> tuple[int, float]:
    """Hold a stream of ``run`` in flight (on the fake engine a mid-stream stall keeps it open), close it as a
    client that goes away would, and return (engine requests running just before the close, ms until the
    engine had a free slot again)."""
    if env.fake is not None:
        env.fake.reset()
        env.fake.faults("stall_mid_stream:t=30,after=2")
    stream = hold_stream(run)
    busy = engine_running(env.engine_url, env.engine_headers())
    stream.close()
    t_close = time.monotonic()
    if env.fake is not None:
        env.fake.faults()
    max_running = session_lock(env).execution.max_running_requests
    return busy, slot_freed_ms(env.engine_url, env.engine_headers(), run.wire_model, t_close, max_running)


def evidence_rows(gateway_state_dir: Path, binding_id: str, at_least: int = 1, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The evidence rows of a binding, once at least ``at_least`` are on disk (the gateway batches writes)."""
    path = gateway_state_dir / "evidence" / f"{binding_id}.requests.jsonl"

    def rows() -> list[dict[str, Any]] | None:
        if not path.exists():
            return None
        found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return found if len(found) >= at_least else None

    return wait_until(rows, timeout_s, what=f"{at_least} evidence row(s) for {binding_id}")


def session_lock(env: CertifyEnv) -> InferenceLockV1:
    from harness.daemon.core import load_sealed_lock

    return load_sealed_lock(env.root, env.run.inference_id)


def chat_body(model: str, *, stream: bool, max_tokens: int | None = 8, content: str = "hello") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}], "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


class RawStream:
    """One POST on a plain socket (HTTP/1.1, chunked answer), so a check controls when the client goes away."""

    def __init__(self, base_url: str, token: str, route: str, body: dict[str, Any], timeout_s: float = 60.0) -> None:
        parts = urlsplit(base_url)
        data = json.dumps(body).encode()
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", int(parts.port or 80)), timeout=timeout_s)
        head = (
            f"POST {parts.path}{route} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        )
        self.sock.sendall(head.encode() + data)
        self.raw = b""
        self.eof = False

    def read_events(self, n: int) -> bytes:
        """Read until ``n`` SSE ``data:`` lines arrived (or the server closed)."""
        while self.raw.count(b"data: ") < n and not self.eof:
            chunk = self.sock.recv(65536)
            if not chunk:
                self.eof = True
            self.raw += chunk
        return self.raw

    def read_all(self) -> bytes:
        while not self.eof:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.eof = True
            self.raw += chunk
        return self.raw

    @property
    def status(self) -> int:
        line = self.raw.split(b"\r\n", 1)[0].split()
        return int(line[1]) if len(line) > 1 else 0

    @property
    def clean_end(self) -> bool:
        """Did the chunked body end with its terminator (a clean end, as opposed to a broken stream)?"""
        return self.raw.endswith(b"\r\n0\r\n\r\n")

    @property
    def done_seen(self) -> bool:
        return b"data: [DONE]" in self.raw or b"response.completed" in self.raw or b"response.incomplete" in self.raw

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def hold_stream(run: RunHandle, events: int = 2, tries: int = 3) -> RawStream:
    """A chat stream through ``run`` that is still generating after ``events`` events (the lock's whole
    output budget; on the fake engine the caller sets a stall first). Fails the check if every try ended."""
    for _ in range(tries):
        body = chat_body(run.wire_model, stream=True, max_tokens=None, content="Tell a long story.")
        stream = RawStream(run.base_url, run.token, "/chat/completions", body)
        stream.read_events(events)
        if stream.status == 200 and not stream.done_seen and not stream.eof:
            return stream
        stream.close()
    raise AssertionError("could not hold a stream in flight (every answer ended at once)")


# -- the private daemon -------------------------------------------------------------------------------


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
        return self.root.root / "inference" / "gateway"

    def client(self) -> Any:
        from harness.daemon.client import DaemonClient

        return DaemonClient(self.root, timeout_s=60.0)

    def start(self) -> dict[str, Any]:
        from harness.daemon.client import start_daemon

        status = start_daemon(self.root, self.args, timeout_s=180.0)
        self.pids_seen.add(int(status["pid"]))
        return status

    def daemon_pid(self) -> int:
        return int(self.client().status()["pid"])

    def create_run(self, run_id: str | None = None, extra_flags: tuple[str, ...] = (), **body: Any) -> RunHandle:
        from certify.session import _create_run

        payload = {**self.body, **body, "run_id": run_id or "priv-" + secrets.token_hex(5)}
        if extra_flags:
            payload["fake_flags"] = [*payload.get("fake_flags", []), *extra_flags]
        run = _create_run(self.client(), payload)
        self.runs[run.run_id] = run
        pid = self.engine_pid(run.service_id)
        if pid is not None:
            self.pids_seen.add(pid)
        return run

    def delete_run(self, run: RunHandle) -> dict[str, Any]:
        self.runs.pop(run.run_id, None)
        out: dict[str, Any] = self.client().request("DELETE", f"/v1/runs/{run.run_id}")
        return out

    def stop_service(self, service_id: str) -> None:
        for run in [r for r in self.runs.values() if r.service_id == service_id]:
            with contextlib.suppress(Exception):
                self.delete_run(run)
        from harness.errors import HitchError

        with contextlib.suppress(HitchError):
            self.client().stop_service(service_id, force=True)

    def record(self, service_id: str) -> Any:
        from harness.service.state_store import ServiceStateStore

        return ServiceStateStore(self.root, service_id).read()

    def events(self, service_id: str) -> list[Any]:
        from harness.service.state_store import ServiceStateStore

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
        from certify.session import _engine_endpoint

        url, key = _engine_endpoint(self.root, service_id)
        return url, {"Authorization": f"Bearer {key}"}

    def seal_variant(self, lock: InferenceLockV1, **sections: dict[str, Any]) -> InferenceLockV1:
        """Store a variant of a sealed lock (other execution/resources values, its own id) in this root."""
        data = lock.to_json_dict()
        for name, update in sections.items():
            data[name].update(update)
        data.pop("inference_id", None)
        data["inference_id"] = compute_inference_id(data)
        variant = InferenceLockV1.model_validate(data)
        folder = self.root.digest_dir(self.root.locks, variant.inference_id)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / "lock.json", variant.to_json_dict())
        return variant

    def sealed_lock(self, inference_id: str) -> InferenceLockV1:
        from harness.daemon.core import load_sealed_lock

        return load_sealed_lock(self.root, inference_id)

    def close(self) -> list[str]:
        """Stop the daemon (drain, confirmed stops); kill by PID anything of ours still alive. Returns what was killed."""
        from harness.daemon.client import reap_spawned, stop_daemon

        with contextlib.suppress(Exception):
            stop_daemon(self.root, timeout_s=60)
        return _kill_leftovers(str(self.root.root), self.pids_seen, reap_spawned)


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
    import shutil

    from harness.runtimes import get_runtime
    from harness.runtimes.install import runtime_dir
    from harness.runtimes.pins import pins_path
    from harness.store import import_model, model_files_dir

    root = HitchRoot(base / "root")
    root.root.mkdir(parents=True, exist_ok=True)
    imported = import_model(root, model_files_dir(env.root, env.model_id), "certify-private")
    manifest = get_runtime(env.runtime_id)
    shared_env = runtime_dir(env.root, manifest)
    if shared_env.is_dir():  # an installed python-env runtime: link it instead of installing it again
        mine = runtime_dir(root, manifest)
        mine.parent.mkdir(parents=True, exist_ok=True)
        if not mine.exists():
            mine.symlink_to(shared_env, target_is_directory=True)
    pins = pins_path(env.root.root)
    if pins.is_file():  # an operator-pinned image (hitch runtime pin): the private root resolves the same runtime
        pins_path(root.root).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pins, pins_path(root.root))
    body: dict[str, Any] = {
        "device": env.device,
        "profile": env.options.profile,
        "runtime": env.runtime_id,
        "engine": env.engine,
        "launcher": env.options.launcher or "process",
    }
    if "image" in env.body:  # an oci session: the private daemon runs the same pinned image
        body["image"] = env.body["image"]
    sealed = env.root.digest_dir(env.root.locks, env.run.inference_id)
    if imported.manifest.model_id == env.model_id and (sealed / "lock.json").is_file():
        # the session's lock was sealed by an engine that verified it: reuse it, the private root needs no prepare
        target = root.digest_dir(root.locks, env.run.inference_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(sealed, target, dirs_exist_ok=True)
        body["inference_id"] = env.run.inference_id
    else:
        body["model"] = "local/certify-private"
    fake: FakeControl | None = None
    if env.engine == "fake":
        private = ensure_private_dir(root.root / "certify-private")
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
    with _REGISTRY_LOCK:
        daemon = _REGISTRY.get(key)
        if daemon is None:
            daemon = _make_private_daemon(certify_env, tmp_path_factory.mktemp("private-daemon"), PRIVATE_TTL_MS)
            _REGISTRY[key] = daemon
    try:
        yield daemon
    finally:
        with _REGISTRY_LOCK:
            _REGISTRY.pop(key, None)
        daemon.close()


def bind_upstream(
    gateway: GatewayThread,
    run_id: str,
    base_url: str,
    engine_key: str,
    lock: InferenceLockV1,
    wire_model: str,
    tokenizer_dir: Path,
) -> Any:
    """Register a run on ``gateway`` whose upstream is ``base_url`` (an engine, or a fault proxy in front of one)."""
    from gateway.bindings import UpstreamTarget

    target = UpstreamTarget(
        base_url=base_url, engine_key=engine_key, service_id="svc-certify-private", inference_id=lock.inference_id,
        epoch=1, lock=lock, wire_model=wire_model, tokenizer_dir=tokenizer_dir,
    )  # fmt: skip
    return gateway.register(run_id, target)


def queue_counts(gateway: GatewayThread) -> tuple[int, int, int, int]:
    """(acquired, released, repeat_releases, in_use) summed over the gateway's admission queues."""

    def counts() -> tuple[int, int, int, int]:
        qs = list(gateway.gw.queues.values())
        return (
            sum(q.acquired for q in qs),
            sum(q.released for q in qs),
            sum(q.repeat_releases for q in qs),
            sum(q.in_use for q in qs),
        )

    return gateway.call(counts)


@dataclass
class PrivateStack:
    """A fake engine process and a gateway (own loop thread) in front of it, with one registered run."""

    engine: FakeEngineProcess
    gateway: GatewayThread
    state_dir: Path
    base_url: str = ""
    token: str = ""
    binding_id: str = ""
    wire_model: str = "certify-private"

    @property
    def control(self) -> FakeControl:
        return self.engine.control

    @property
    def engine_url(self) -> str:
        return self.engine.base

    @classmethod
    def start(
        cls, env: CertifyEnv, workdir: Path, lock: InferenceLockV1, *flags: str, max_response_bytes: int = 256 << 20
    ) -> PrivateStack:
        from gateway.server import GatewayConfig
        from harness.store import model_files_dir

        model_dir = model_files_dir(env.root, lock.model_id)
        engine = start_fake_engine(
            model_dir, workdir, *flags, served=cls.wire_model, max_running=lock.execution.max_running_requests
        )
        try:
            state_dir = workdir / "gateway"
            gateway = GatewayThread(GatewayConfig(state_dir=state_dir, metrics_port=None, max_response_bytes=max_response_bytes))
        except BaseException:
            engine.stop()
            raise
        stack = cls(engine, gateway, state_dir)
        try:
            record = bind_upstream(gateway, "certify-private-run", engine.base, engine.key, lock, stack.wire_model, model_dir)
            stack.base_url, stack.binding_id, stack.token = record.base_url, record.binding_id, gateway.token_of(record)
            return stack
        except BaseException:
            stack.close()
            raise

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def engine_headers(self) -> dict[str, str]:
        return self.engine.headers()

    def queue_counts(self) -> tuple[int, int, int, int]:
        return queue_counts(self.gateway)

    def rows(self, at_least: int = 1) -> list[dict[str, Any]]:
        self.gateway.settle_evidence()
        return evidence_rows(self.state_dir, self.binding_id, at_least)

    def close(self) -> None:
        self.gateway.close()
        self.engine.stop()
