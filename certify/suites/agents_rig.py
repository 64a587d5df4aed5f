"""A private fake engine (scripted turns) behind a private in-process gateway, for the agents suite's
tool-loop checks and tests/harness/agents (the session's shared engine cannot load a script).

Owns :class:`AgentRig`: starts ``python -m fixtures.fake_sglang --fake-script FILE`` on a free loopback port
with a control port, a :class:`gateway.server.Gateway` with ``capture="full"`` on its own event loop thread,
registers one run with a lock built for the tiny checkpoint at the given context, and exposes the run's
base URL, token and the captured request bodies (what the engine received, in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from certify.processes import stop_process
from certify.session import FakeControl
from gateway.bindings import UpstreamTarget
from gateway.server import Gateway, GatewayConfig
from harness.contracts.lock import InferenceLockV1
from harness.contracts.model import LocalModelManifestV1
from harness.lock import build_lock
from harness.net import free_port
from harness.runtimes import get_runtime

__all__ = ["AgentRig", "rig_lock"]

_REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def rig_lock(model: LocalModelManifestV1, context: int) -> InferenceLockV1:
    """A CPU lock of the session's catalog runtime for ``model`` at ``context`` tokens."""
    return build_lock(
        model,
        get_runtime("sglang-0.5.23-cpu-generic"),
        device="cpu",
        profile="baseline",
        cpu_cores_per_node=2,
        context_tokens=context,
    )


class AgentRig:
    def __init__(self, workdir: Path, model_dir: Path, lock: InferenceLockV1, script: list[dict[str, Any]], *extra: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.lock = lock
        self.served = "rig-wire"
        script_file = workdir / "script.jsonl"
        script_file.write_text("".join(json.dumps(turn) + "\n" for turn in script), encoding="utf-8")
        self.port = free_port()
        self.key = "ek-" + secrets.token_urlsafe(24)
        self._ctl_token = secrets.token_urlsafe(16)
        token_file = workdir / "ctl-token"
        token_file.write_text(self._ctl_token)
        token_file.chmod(0o600)
        self._ctl_port_file = workdir / "ctl-port"
        self._log = workdir / "engine.log"
        argv = [
            sys.executable, "-m", "fixtures.fake_sglang", "--model-path", str(model_dir), "--port", str(self.port),
            "--served-model-name", self.served, "--api-key", self.key,
            *FakeControl.launch_flags(self._ctl_port_file, token_file),
            "--context-length", str(lock.execution.context_tokens_per_request), "--fake-script", str(script_file), *extra,
        ]  # fmt: skip
        with self._log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=_REPO, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agents-rig-gateway", daemon=True)
        self._thread.start()
        try:
            self._wait_ready()
            self.gw: Gateway = self._run(self._make(GatewayConfig(state_dir=workdir / "gateway", capture="full")))
            self._run(self.gw.start())
            target = UpstreamTarget(
                base_url=f"http://127.0.0.1:{self.port}",
                engine_key=self.key,
                service_id="svc-agents-rig",
                inference_id=lock.inference_id,
                epoch=1,
                lock=lock,
                wire_model=self.served,
                tokenizer_dir=model_dir,
            )
            self.record = self._call_sync(lambda: self.gw.register("run-agents-rig", target))
        except BaseException:
            self.close()
            raise
        self.token = Path(self.record.token_ref).read_text(encoding="utf-8").strip()
        self.base_url = self.record.base_url

    @staticmethod
    async def _make(config: GatewayConfig) -> Gateway:
        return Gateway(config)

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _call_sync(self, fn: Any) -> Any:
        async def wrapped() -> Any:
            return fn()

        return self._run(wrapped())

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fake engine exited: {self._log.read_text(errors='replace')[-2000:]}")
            if "ready to roll" in self._log.read_text(errors="replace") and self._ctl_port_file.exists():
                return
            time.sleep(0.05)
        raise RuntimeError("fake engine not ready")

    def ctl(self, method: str, path: str, **kw: Any) -> Any:
        return FakeControl(self._ctl_port_file, self._ctl_token).ctl(method, path, **kw)

    def engine_requests(self) -> list[dict[str, Any]]:
        return FakeControl(self._ctl_port_file, self._ctl_token).received()

    def captures(self) -> list[tuple[dict[str, Any], bytes]]:
        """(request body sent upstream, response bytes) of every forwarded request of one agent run, in turn order."""
        self._run(self.gw.settle_evidence(20.0))
        folder = self.workdir / "gateway" / "capture" / self.record.binding_id
        out: list[tuple[int, dict[str, Any], bytes]] = []
        for meta_path in folder.glob("*.meta.json"):
            base = meta_path.name[: -len(".meta.json")]
            req = folder / f"{base}.request.json"
            if not req.exists():
                continue
            body = json.loads(req.read_bytes())
            resp = folder / f"{base}.response.bin"
            out.append((len(body.get("input") or []), body, resp.read_bytes() if resp.exists() else b""))
        out.sort(key=lambda row: row[0])  # one agent's history only grows, so its length orders the turns
        return [(body, resp) for _, body, resp in out]

    def evidence_rows(self) -> list[dict[str, Any]]:
        self._run(self.gw.settle_evidence(20.0))
        path = self.gw.evidence.path_for(self.record.binding_id)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if hasattr(self, "gw"):
                self._run(self.gw.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        with contextlib.suppress(Exception):
            self._loop.close()
        stop_process(self.proc)
