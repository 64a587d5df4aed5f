"""Runs served through the daemon's gateway: ``POST /v1/runs`` and ``DELETE /v1/runs/{run_id}`` (issue 5 item 10).

:class:`RunService` owns the daemon's one :class:`~gateway.server.Gateway` (loopback, a free port chosen by
the kernel, its state in the root's private ``inference/gateway/`` directory, 0700) and the table of runs.
Creating a run acquires the service with the run as lease owner, then registers the run on the gateway
with an upstream taken only from the manager's service record: the engine's loopback URL, epoch and wire
model from the ready endpoint, the engine key read from the service's 0600 key file. The answer names the
run's 0600 token *file*, never the token. Deleting a run revokes its binding and releases its lease; both
are idempotent.

When the manager takes a service out of use (``inference.failed`` after the supervisor's ``on_failure``,
``inference.draining`` on a stop or the idle TTL, ``inference.stopped``), :meth:`RunService.on_event`
revokes every binding of that service at once, so the next request is refused instead of reaching a dead
or draining engine.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.bindings import UpstreamTarget
from gateway.server import Gateway, GatewayConfig
from harness.contracts.events import LifecycleEventV1
from harness.contracts.lock import InferenceLockV1
from harness.daemon.core import DaemonCore, load_sealed_lock
from harness.daemon.prepare import PrepareRequest, prepare
from harness.devices import probe_cpu
from harness.errors import HitchError
from harness.lock import build_lock
from harness.runtimes import get_runtime
from harness.service.starter_supervisor import EngineChoice, SupervisedService
from harness.store import model_files_dir, resolve_model

__all__ = ["REVOKING_EVENTS", "RunService", "add_run_routes"]

REVOKING_EVENTS = frozenset({"inference.failed", "inference.draining", "inference.stopped"})
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass
class _Run:
    run_id: str
    lease_id: str
    binding_id: str
    service_id: str


class RunService:
    """The daemon's gateway and the runs registered on it (one event loop: the daemon's)."""

    def __init__(self, core: DaemonCore, gateway: Gateway | None = None) -> None:
        self.core = core
        state_dir = core.root.root / "inference" / "gateway"
        self.gateway = gateway or Gateway(GatewayConfig(state_dir=state_dir, host="127.0.0.1", port=0))
        self.runs: dict[str, _Run] = {}

    async def start(self) -> None:
        await self.gateway.start()

    async def stop(self) -> None:
        for run_id in list(self.runs):
            self.gateway.revoke(self.runs.pop(run_id).binding_id)
        await self.gateway.stop()

    def on_event(self, event: LifecycleEventV1) -> None:
        """The manager's event sink hook: a service leaving use revokes all of its bindings."""
        if event.event in REVOKING_EVENTS:
            self.gateway.registry.revoke_service(event.service_id)

    # -- runs ---------------------------------------------------------------------------------------

    async def _lock_for(self, body: dict[str, Any], choice: EngineChoice) -> InferenceLockV1:
        inference_id = body.get("inference_id")
        if isinstance(inference_id, str) and inference_id:
            return load_sealed_lock(self.core.root, inference_id)
        model = body.get("model")
        device, profile, runtime = body.get("device", "cpu"), body.get("profile", "baseline"), body.get("runtime")
        if not isinstance(model, str) or not model or not isinstance(runtime, str) or not runtime:
            raise HitchError("usage_error", "a run needs an inference_id, or a model and a runtime", {})
        if device not in ("cpu", "cuda") or profile not in ("baseline", "throughput"):
            raise HitchError("usage_error", "device is cpu|cuda and profile baseline|throughput", {})
        root = self.core.root
        draft = build_lock(
            resolve_model(root, model),
            get_runtime(runtime),
            device=device,
            profile=profile,
            cpu_cores_per_node=probe_cpu().cores_per_node,
        )
        sealed = _sealed_for_draft(self.core, draft.inference_id)
        if sealed is None:  # not prepared yet: prepare (start, verify, seal) first
            result = await prepare(self.core, PrepareRequest(model, device, profile, runtime, choice))
            sealed = str(result["inference_id"])
        return load_sealed_lock(root, sealed)

    async def create(self, body: dict[str, Any], choice: EngineChoice) -> dict[str, Any]:
        run_id = body.get("run_id") or "run-" + secrets.token_hex(8)
        if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
            raise HitchError("usage_error", "a run id is 1..100 of [A-Za-z0-9._-]", {})
        if run_id in self.runs:
            raise HitchError("usage_error", f"run {run_id!r} exists; delete it first", {"run_id": run_id})
        lock = await self._lock_for(body, choice)
        lease = await self.core.acquire(lock, run_id, choice)
        try:
            service = lease.service
            if not isinstance(service, SupervisedService):
                raise HitchError("internal_error", "a run needs a supervised service", {})
            endpoint = service.endpoint
            try:
                engine_key = endpoint.key_files.api_key.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise HitchError("inference_process_exited", "the engine key file is gone", {}) from exc
            target = UpstreamTarget(
                base_url=endpoint.base_url,
                engine_key=engine_key,
                service_id=endpoint.service_id,
                inference_id=endpoint.inference_id,
                epoch=endpoint.epoch,
                lock=lock,
                wire_model=endpoint.wire_model,
                tokenizer_dir=model_files_dir(self.core.root, lock.model_id),
            )
            self.gateway.registry.set_service_epoch(endpoint.service_id, endpoint.epoch)
            record = self.gateway.register(run_id, target)
        except BaseException:
            await self.core.release(lease.lease_id)
            raise
        self.runs[run_id] = _Run(run_id, lease.lease_id, record.binding_id, record.service_id)
        return {
            "run_id": run_id,
            "lease_id": lease.lease_id,
            "binding_id": record.binding_id,
            "service_id": record.service_id,
            "inference_id": record.inference_id,
            "epoch": record.epoch,
            "base_url": record.base_url,
            "wire_model": record.wire_model,
            "token_file": record.token_ref,
        }

    async def delete(self, run_id: str) -> dict[str, Any]:
        run = self.runs.pop(run_id, None)
        if run is None:
            return {"run_id": run_id, "deleted": False, "released": False}
        binding = self.gateway.registry.get(run.binding_id)
        if binding is not None:
            self.gateway.revoke(run.binding_id)
        released = await self.core.release(run.lease_id)
        return {"run_id": run_id, "deleted": True, "released": released, "binding_id": run.binding_id}

    def view(self) -> list[dict[str, Any]]:
        out = []
        for run in self.runs.values():
            binding = self.gateway.registry.get(run.binding_id)
            state = binding.record.state if binding is not None else "unknown"
            out.append({"run_id": run.run_id, "lease_id": run.lease_id, "binding_id": run.binding_id, "state": state})
        return out


def _sealed_for_draft(core: DaemonCore, draft_id: str) -> str | None:
    """The sealed inference id prepared from this draft lock (itself, or its resealed pool variant)."""
    root = core.root
    if (root.digest_dir(root.locks, draft_id) / "lock.json").is_file():
        return draft_id
    folder = root.locks / "sha256"
    if not folder.is_dir():
        return None
    for validation in sorted(folder.glob("*/validation.json")):
        try:
            data = json.loads(validation.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("draft_inference_id") == draft_id and (validation.parent / "lock.json").is_file():
            found = data.get("inference_id")
            if isinstance(found, str):
                return found
    return None


def add_run_routes(
    app: web.Application,
    runs: RunService,
    body_of: Callable[[web.Request], Awaitable[dict[str, Any]]],
    choice_of: Callable[[dict[str, Any]], EngineChoice],
    reply: Callable[[dict[str, Any]], web.Response],
) -> None:
    """``POST /v1/runs``, ``GET /v1/runs``, ``DELETE /v1/runs/{run_id}`` on the daemon's management app."""

    async def create(request: web.Request) -> web.Response:
        body = await body_of(request)
        return reply({"kind": "run", **await runs.create(body, choice_of(body))})

    async def listing(_: web.Request) -> web.Response:
        return reply({"kind": "runs", "runs": runs.view()})

    async def delete(request: web.Request) -> web.Response:
        return reply({"kind": "run-delete", **await runs.delete(request.match_info["run_id"])})

    app.router.add_post("/v1/runs", create)
    app.router.add_get("/v1/runs", listing)
    app.router.add_delete("/v1/runs/{run_id}", delete)
