"""A private fake engine (scripted turns) behind a private in-process gateway, for the agents suite's
tool-loop checks and tests/harness/agents (the session's shared engine cannot load a script).

Owns :class:`AgentRig`: a :class:`~certify.kit.stack.PrivateStack` whose engine plays a script of model
answers and whose gateway captures every exchange (``capture="full"``), on a lock built for the tiny
checkpoint at the given context (:func:`rig_lock`); it exposes the run's base URL, token and the captured
request bodies (what the engine received, in order).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Self

from certify.kit.probes import read_evidence
from certify.kit.stack import PrivateStack, write_script
from gateway.capture_segments import read_captures
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
    """The rig, running from construction until :meth:`close` (or the end of a ``with`` block)."""

    served = "rig-wire"

    def __init__(self, workdir: Path, model_dir: Path, lock: InferenceLockV1, script: list[dict[str, Any]], *extra: str) -> None:
        self.workdir = workdir
        self.lock = lock
        flags = ["--fake-script", str(write_script(workdir, script)), *parser_flags(lock), *extra]
        running = PrivateStack.running(
            model_dir, workdir, lock, *flags, served=self.served, run_id="run-agents-rig", service_id="svc-agents-rig",
            context=lock.execution.context_tokens_per_request, capture="full", metrics_port=0,
        )  # fmt: skip
        with contextlib.ExitStack() as held:
            self.stack = held.enter_context(running)
            self._held = held.pop_all()  # kept open past __init__: closed by close()
        self.engine = self.stack.engine
        self.token = self.stack.run.token
        self.base_url = self.stack.run.base_url

    @property
    def gateway(self) -> GatewayThread:
        return self.stack.gateway

    def ctl(self, method: str, path: str, **kw: Any) -> Any:
        return self.stack.ctl(method, path, **kw)

    def engine_requests(self) -> list[dict[str, Any]]:
        return self.engine.received()

    def captures(self) -> list[tuple[dict[str, Any], bytes]]:
        """(request body sent upstream, response bytes) of every forwarded request of one agent run, in turn order."""
        self.gateway.settle_evidence()
        folder = self.stack.state_dir / "capture" / self.stack.run.binding_id
        out: list[tuple[int, dict[str, Any], bytes]] = []
        for _, request, response in read_captures(folder):
            if not request:
                continue
            body = json.loads(request)
            out.append((len(body.get("input") or []), body, response))
        out.sort(key=lambda row: row[0])  # one agent's history only grows, so its length orders the turns
        return [(body, resp) for _, body, resp in out]

    def evidence_rows(self) -> list[dict[str, Any]]:
        self.gateway.settle_evidence()
        return read_evidence(self.stack.state_dir, self.stack.run.binding_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._held.close()
