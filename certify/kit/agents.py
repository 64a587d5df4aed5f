"""A private fake engine (scripted turns) behind a private in-process gateway, for the agents suite's
tool-loop checks and tests/harness/agents (the session's shared engine cannot load a script).

Owns :class:`AgentRig`: starts the fake engine with ``--fake-script FILE`` (the kit's launcher), a gateway with
``capture="full"`` on its own event loop thread (the kit's rig),
registers one run with a lock built for the tiny checkpoint at the given context, and exposes the run's
base URL, token and the captured request bodies (what the engine received, in order).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fixtures.fake_sglang.client import start_fake_engine
from gateway.bindings import UpstreamTarget
from gateway.server import GatewayConfig
from gateway.testing import GatewayThread
from harness.contracts.lock import InferenceLockV1
from harness.contracts.model import LocalModelManifestV1
from harness.engine.argv import parser_flags
from harness.lock import build_lock
from harness.runtimes import get_runtime

__all__ = ["AgentRig", "rig_lock"]


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
        context = lock.execution.context_tokens_per_request
        flags = ["--fake-script", str(script_file), *parser_flags(lock), *extra]
        self.engine = start_fake_engine(model_dir, workdir, *flags, served=self.served, context=context)
        self._gateway: GatewayThread | None = None
        try:
            self._gateway = GatewayThread(GatewayConfig(state_dir=workdir / "gateway", capture="full"))
            target = UpstreamTarget(
                base_url=self.engine.base,
                engine_key=self.engine.key,
                service_id="svc-agents-rig",
                inference_id=lock.inference_id,
                epoch=1,
                lock=lock,
                wire_model=self.served,
                tokenizer_dir=model_dir,
            )
            self.record = self._gateway.register("run-agents-rig", target)
        except BaseException:
            self.close()
            raise
        self.token = self._gateway.token_of(self.record)
        self.base_url = self.record.base_url

    @property
    def gateway(self) -> GatewayThread:
        assert self._gateway is not None
        return self._gateway

    def ctl(self, method: str, path: str, **kw: Any) -> Any:
        return self.engine.ctl(method, path, **kw)

    def engine_requests(self) -> list[dict[str, Any]]:
        return self.engine.received()

    def captures(self) -> list[tuple[dict[str, Any], bytes]]:
        """(request body sent upstream, response bytes) of every forwarded request of one agent run, in turn order."""
        self.gateway.settle_evidence()
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
        self.gateway.settle_evidence()
        path = self.gateway.gw.evidence.path_for(self.record.binding_id)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        if self._gateway is not None:
            self._gateway.close()
        self.engine.stop()
