"""Test support for the gateway: a fake engine process, a gateway on its own loop thread, locks, scans."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvloop

from gateway.bindings import UpstreamTarget
from gateway.server import Gateway, GatewayConfig
from harness.contracts.lock import InferenceLockV1
from harness.lock import build_lock
from tests.harness.lock_inputs import model_manifest, runtime_manifest

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_lock(
    *, max_running: int = 1, context: int = 4096, max_output: int | None = None, top_k: int = 0, max_queued: int | None = None
) -> InferenceLockV1:
    lock = build_lock(
        model_manifest(), runtime_manifest(), device="cpu", profile="baseline", cpu_cores_per_node=2, context_tokens=context
    )
    queued = {"max_queued_requests": max_queued} if max_queued is not None else {}
    ex = lock.execution.model_copy(update={"max_running_requests": max_running, "queue_timeout_ms": 30_000, **queued})
    gen = lock.generation.model_copy(update={"top_k": top_k, **({"max_output_tokens": max_output} if max_output else {})})
    return lock.model_copy(update={"execution": ex, "generation": gen})


@dataclass
class Engine:
    proc: subprocess.Popen[bytes]
    port: int
    key: str
    control_token: str
    control_port_file: Path
    log: Path
    model_dir: Path
    served: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ctl(self, method: str, path: str, **kw: Any) -> Any:
        port = self.control_port_file.read_text().strip()
        r = httpx.request(
            method, f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {self.control_token}"}, timeout=10, **kw
        )
        r.raise_for_status()
        return r.json()

    def received(self) -> list[dict[str, Any]]:
        """Every request the engine's SGLang surface received (health polls excluded)."""
        return [r for r in self.ctl("GET", "/requests")["requests"] if not r["path"].startswith("/health")]

    def state(self) -> dict[str, Any]:
        return dict(self.ctl("GET", "/state"))

    def faults(self, *add: str) -> None:
        self.ctl("POST", "/faults", json={"clear": True, "add": list(add)})

    def reset(self) -> None:
        self.faults()
        self.ctl("DELETE", "/requests")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"fake engine exited early: {self.log.read_text(errors='replace')}")
            if "ready to roll" in self.log.read_text(errors="replace") and self.control_port_file.exists():
                return
            time.sleep(0.02)
        raise AssertionError("fake engine not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_engine(
    model_dir: Path, workdir: Path, *extra: str, served: str = "tiny-wire", max_running: int | None = None
) -> Engine:
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    key = "ek-" + secrets.token_urlsafe(24)
    ctl_token = secrets.token_urlsafe(16)
    ctl_token_file = workdir / f"ctl-token-{port}"
    ctl_token_file.write_text(ctl_token)
    ctl_token_file.chmod(0o600)
    port_file = workdir / f"ctl-port-{port}"
    key_file = workdir / f"engine-key-{port}"
    key_file.write_text(key)
    key_file.chmod(0o600)
    log = workdir / f"engine-{port}.log"
    argv = [
        sys.executable, "-m", "fixtures.fake_sglang", "--model-path", str(model_dir), "--port", str(port),
        "--served-model-name", served, "--api-key", key, "--fake-control-port", "0",
        "--fake-control-port-file", str(port_file), "--fake-control-token-file", str(ctl_token_file),
    ]  # fmt: skip
    if max_running is not None:
        argv += ["--max-running-requests", str(max_running)]
    argv += list(extra)
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    engine = Engine(proc, port, key, ctl_token, port_file, log, model_dir, served)
    try:
        engine.wait_ready()
    except BaseException:
        engine.stop()
        raise
    return engine


class GatewayThread:
    """A real gateway listening on loopback, run on its own uvloop in a background thread."""

    def __init__(self, config: GatewayConfig) -> None:
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gateway-loop", daemon=True)
        self._thread.start()
        self.gw = self.run(self._make(config))
        self.run(self.gw.start())

    @staticmethod
    async def _make(config: GatewayConfig) -> Gateway:
        return Gateway(config)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        async def wrapped() -> T:
            return fn()

        return self.run(wrapped())

    def register(self, run_id: str, target: UpstreamTarget, **kw: Any) -> Any:
        return self.call(lambda: self.gw.register(run_id, target, **kw))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.gw.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def target_for(engine: Engine, lock: InferenceLockV1, *, service_id: str = "svc-test", epoch: int = 1) -> UpstreamTarget:
    return UpstreamTarget(
        base_url=engine.base,
        engine_key=engine.key,
        service_id=service_id,
        inference_id=lock.inference_id,
        epoch=epoch,
        lock=lock,
        wire_model=engine.served,
        tokenizer_dir=engine.model_dir,
    )


def token_of(record: Any) -> str:
    return Path(record.token_ref).read_text()


def evidence_rows(gt: GatewayThread, binding_id: str) -> list[dict[str, Any]]:
    import json

    from harness.contracts.events import RequestEvidenceV1

    gw = gt.gw
    gt.run(gw.settle_evidence(20.0))  # a client may hold a reply's last byte before the handler records it
    path = gw.evidence.path_for(binding_id)
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        RequestEvidenceV1.model_validate(row)  # every row is a valid record
    return rows


def secret_hits(root: Path, secrets_: list[str]) -> list[str]:
    """Files under ``root`` holding any secret, except 0600 files under a ``private`` directory."""
    hits: list[str] = []
    needles = [s.encode() for s in secrets_ if s]
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if "private" in path.parts and mode == 0o600:
            continue
        data = path.read_bytes()
        if any(n in data for n in needles):
            hits.append(str(path.relative_to(root)))
    return hits
