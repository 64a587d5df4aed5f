"""A private fake engine behind a private gateway, for the checks that must not touch the session's engine.

:class:`PrivateStack` is one fake engine process (the kit's launcher, :func:`~fixtures.fake_sglang.client.
start_fake_engine`) and one in-process gateway on its own loop thread (:class:`~gateway.testing.GatewayThread`)
with one registered run, on a lock the check chooses (short request timeout, small response cap, a script of
model answers, full capture). The faults suites use it for a fault that needs its own gateway settings,
the protocol suite for a scripted answer (:func:`scripted_stack`: the shared engine is never given a
script), the agents suite for a tool loop (:mod:`certify.kit.agents`). :func:`bind_upstream` registers a
run whose upstream is anything (an engine, or a fault proxy in front of one).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from certify.kit.probes import evidence_rows, session_lock
from certify.session import CertifyEnv, RunHandle
from certify.timeline import span
from fixtures.fake_sglang.client import FakeEngineProcess, start_fake_engine
from gateway.bindings import UpstreamTarget
from gateway.server import GatewayConfig
from gateway.testing import GatewayThread
from harness.contracts.binding import ModelEndpointBindingV1
from harness.contracts.lock import InferenceLockV1
from harness.engine.argv import parser_flags
from harness.store import model_files_dir

__all__ = ["PrivateStack", "bind_upstream", "queue_counts", "run_handle", "scripted_stack"]


def bind_upstream(
    gateway: GatewayThread,
    run_id: str,
    base_url: str,
    engine_key: str,
    lock: InferenceLockV1,
    wire_model: str,
    tokenizer_dir: Path,
    service_id: str = "svc-certify-private",
) -> ModelEndpointBindingV1:
    """Register a run on ``gateway`` whose upstream is ``base_url`` (an engine, or a fault proxy in front of one)."""
    target = UpstreamTarget(
        base_url=base_url, engine_key=engine_key, service_id=service_id, inference_id=lock.inference_id,
        epoch=1, lock=lock, wire_model=wire_model, tokenizer_dir=tokenizer_dir,
    )  # fmt: skip
    return gateway.register(run_id, target)


def run_handle(gateway: GatewayThread, record: ModelEndpointBindingV1) -> RunHandle:
    """The run a gateway registered, as the suites hold a run (URL, token, ids)."""
    return RunHandle(
        run_id=record.run_id, binding_id=record.binding_id, service_id=record.service_id,
        inference_id=record.inference_id, epoch=record.epoch, base_url=record.base_url,
        wire_model=record.wire_model, token=gateway.token_of(record),
    )  # fmt: skip


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
    """A fake engine process and a gateway (own loop thread) in front of it, with one registered run; made for a
    ``with`` block by :meth:`running`."""

    engine: FakeEngineProcess
    gateway: GatewayThread
    state_dir: Path
    run: RunHandle

    @classmethod
    @contextlib.contextmanager
    def running(
        cls,
        model_dir: Path,
        workdir: Path,
        lock: InferenceLockV1,
        *flags: str,
        served: str = "certify-private",
        run_id: str = "certify-private-run",
        service_id: str = "svc-certify-private",
        max_running: int | None = None,
        context: int | None = None,
        **gateway_config: Any,
    ) -> Iterator[PrivateStack]:
        """The engine (``flags`` added to the kit's; ``max_running`` and ``context`` as the fake's flags, its
        defaults when None), then a gateway (``GatewayConfig`` fields in ``gateway_config``; no metrics listener
        unless asked) with one run of ``lock``, for the ``with`` block; the gateway closes, then the engine stops."""
        state_dir = workdir / "gateway"
        config = GatewayConfig(state_dir=state_dir, **{"metrics_port": None, **gateway_config})
        with contextlib.ExitStack() as held:
            with span("private engine and gateway start", engine="private"):
                engine = held.enter_context(
                    start_fake_engine(model_dir, workdir, *flags, served=served, max_running=max_running, context=context)
                )
                gateway = held.enter_context(GatewayThread(config))
                record = bind_upstream(gateway, run_id, engine.base, engine.key, lock, served, model_dir, service_id)
            yield cls(engine, gateway, state_dir, run_handle(gateway, record))

    def headers(self) -> dict[str, str]:
        return self.run.headers()

    def engine_headers(self) -> dict[str, str]:
        return self.engine.headers()

    def ctl(self, method: str, path: str, **kw: Any) -> Any:
        return self.engine.ctl(method, path, **kw)

    def state(self) -> dict[str, Any]:
        return self.engine.state()

    def queue_counts(self) -> tuple[int, int, int, int]:
        return queue_counts(self.gateway)

    def rows(self, at_least: int = 1) -> list[dict[str, Any]]:
        self.gateway.settle_evidence()
        return evidence_rows(self.state_dir, self.run.binding_id, at_least)


def write_script(workdir: Path, turns: list[dict[str, Any]]) -> Path:
    """The fake's ``--fake-script`` file: one model answer per line (``{"text": ...}`` or ``{"tool_calls": [...]}``),
    consumed one per inference request."""
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "script.jsonl"
    script.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    return script


def scripted_stack(
    env: CertifyEnv, turns: list[dict[str, Any]], workdir: Path
) -> contextlib.AbstractContextManager[PrivateStack]:
    """A scripted fake engine (the session's model, sealed lock and wire model) behind a private gateway.

    Everything lives under ``workdir`` (never under the session's HITCH_ROOT)."""
    lock = session_lock(env)
    return PrivateStack.running(
        model_files_dir(env.root, env.model_id), workdir, lock, "--fake-script", str(write_script(workdir, turns)),
        *parser_flags(lock), served=env.run.wire_model, run_id="certify-scripted", service_id="svc-certify-scripted",
    )  # fmt: skip
