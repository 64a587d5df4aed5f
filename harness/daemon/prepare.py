"""``hitch local prepare`` inside the daemon (spec §5 rule 7, issue item 7).

The same supervisor path as a real acquire: draft lock → start with a temporary lease → readiness
(health, ``/server_info`` against the lock, Responses + SSE probes, ``/flush_cache``) → seal → save →
release → stop the service when nobody else holds it.

Sealing with probed token-pool values: the engine is launched with the draft's explicit
``--max-total-tokens`` and readiness compares the effective pool ``/server_info.max_total_num_tokens``
with it. When the engine reports a *different* pool (and that is the only mismatch), the draft cannot be
what runs: the lock is re-drafted with the probed ``max_total_tokens`` — a new ``inference_id`` — and
that lock is started and verified in turn; only a lock an engine has verified is sealed. ``validation.json``
records the draft id, the probed values and the readiness timings. Files go to
``store/inference-locks/sha256/<inference hex>/{lock.json,validation.json}``, each written atomically.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contracts.events import LifecycleEventName, LifecycleEventV1
from harness.contracts.lock import InferenceLockV1, compute_inference_id
from harness.devices import probe_cpu
from harness.errors import HitchError
from harness.lock import Device, ProfileShort, build_lock
from harness.paths import HitchRoot, atomic_write_json
from harness.runtimes import get_runtime
from harness.service.isolation import service_key
from harness.service.manager import LeaseHandle
from harness.service.starter_supervisor import EngineChoice, SupervisedService
from harness.service.state_store import ServiceStateStore
from harness.store import resolve_model, verify_model_files

__all__ = ["PrepareRequest", "device_choice_of", "prepare", "save_sealed", "with_pool"]


@dataclass(frozen=True)
class PrepareRequest:
    model: str
    device: Device
    profile: ProfileShort
    runtime: str
    choice: EngineChoice
    context_tokens: int | None = None
    device_choice: dict[str, Any] | None = None  # the CLI's preflight resolution (requested, reasons), for the event


def device_choice_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """A request body's ``device_choice`` (what the CLI resolved and why), when it sent one."""
    value = body.get("device_choice")
    return value if isinstance(value, dict) else None


def with_pool(lock: InferenceLockV1, pool_tokens: int) -> InferenceLockV1:
    """``lock`` with the probed token pool, under its new inference id."""
    data = lock.to_json_dict()
    data["execution"]["max_total_tokens"] = pool_tokens
    data.pop("inference_id", None)
    data["inference_id"] = compute_inference_id(data)
    return InferenceLockV1.model_validate(data)


def save_sealed(root: HitchRoot, lock: InferenceLockV1, validation: dict[str, Any]) -> tuple[Path, Path]:
    folder = root.digest_dir(root.locks, lock.inference_id)
    lock_path, validation_path = folder / "lock.json", folder / "validation.json"
    atomic_write_json(lock_path, lock.to_json_dict())
    atomic_write_json(validation_path, validation)
    return lock_path, validation_path


def _probed_pool(err: HitchError) -> int | None:
    """The engine's pool when it is the only value that differs from the draft; None otherwise."""
    if err.code != "inference_lock_mismatch":
        return None
    mismatches = err.details.get("mismatches") or []
    if [m.get("field") for m in mismatches] != ["max_total_num_tokens"]:
        return None
    actual = mismatches[0].get("actual")
    return actual if isinstance(actual, int) and actual > 0 else None


def _event(root: HitchRoot, lock: InferenceLockV1, owner: str, name: LifecycleEventName, **details: Any) -> None:
    key = service_key(lock, owner, None)
    ServiceStateStore(root, key.service_id).append_event(
        LifecycleEventV1(
            event=name,
            service_id=key.service_id,
            inference_id=lock.inference_id,
            epoch=0,
            owner_id=owner,
            timestamp=time.time(),
            details=details,
        )
    )


async def prepare(core: Any, req: PrepareRequest) -> dict[str, Any]:
    """Run the prepare flow on ``core`` (a :class:`~harness.daemon.core.DaemonCore`)."""
    root: HitchRoot = core.root
    manifest = resolve_model(root, req.model)
    verify_model_files(root, manifest)
    runtime = get_runtime(req.runtime)
    draft = build_lock(
        manifest,
        runtime,
        device=req.device,
        profile=req.profile,
        cpu_cores_per_node=probe_cpu().cores_per_node,
        context_tokens=req.context_tokens,
    )
    owner = "prepare-" + secrets.token_hex(6)
    lock = draft
    _event(
        root,
        lock,
        owner,
        "inference.preparing",
        model=req.model,
        runtime=runtime.name,
        backend_certification=lock.execution.backend_certification,
        device_choice=req.device_choice or {"device": req.device, "reasons": ["given to the daemon directly"]},
        **req.choice.to_json(),
    )
    started = time.monotonic()
    try:
        lease: LeaseHandle = await core.acquire(lock, owner, req.choice)
    except HitchError as err:
        pool = _probed_pool(err)
        if pool is None or pool < lock.execution.context_tokens_per_request:
            raise
        lock = with_pool(draft, pool)
        _event(root, lock, owner, "inference.preparing", resealed_from=draft.inference_id, max_total_tokens=pool)
        lease = await core.acquire(lock, owner, req.choice)
    try:
        service = lease.service
        if not isinstance(service, SupervisedService):
            raise HitchError("internal_error", "prepare needs a supervised service", {})
        report = service.readiness
        validation = {
            "schema_version": "1",
            "kind": "inference-validation",
            "inference_id": lock.inference_id,
            "draft_inference_id": draft.inference_id,
            "model_id": lock.model_id,
            "runtime_id": lock.runtime_id,
            "runtime": runtime.name,
            "device": req.device,
            "device_choice": req.device_choice,
            "backend_certification": lock.execution.backend_certification,
            "profile": lock.profile,
            "engine": req.choice.engine,
            "launcher": req.choice.launcher,
            "engine_version": report.engine_version,
            "probed": {"max_total_num_tokens": report.max_total_num_tokens},
            "draft": {"max_total_tokens": draft.execution.max_total_tokens},
            "readiness": {
                "steps": report.steps,
                "health_s": report.health_s,
                "server_info_s": report.server_info_s,
                "responses_s": report.responses_s,
                "stream_s": report.stream_s,
                "flushed_s": report.flushed_s,
                "probe_output_tokens": report.probe_output_tokens,
            },
            "service_id": lease.service_id,
            "epoch": lease.epoch,
            "validated_at": time.time(),
        }
        lock_path, validation_path = save_sealed(root, lock, validation)
    finally:
        await core.release(lease.lease_id)
    # Nobody else holds it: stop now rather than idling for the TTL (spec §5 rule 7).
    stopped = False
    if not any(s.service_id == lease.service_id and s.owners for s in core.manager.services()):
        try:
            stopped = await core.stop_service(lease.service_id, force=False)
        except HitchError as err:
            if err.code != "inference_in_use":
                raise
    events = [e.event for e in ServiceStateStore(root, lease.service_id).events() if e.inference_id == lock.inference_id]
    return {
        "inference_id": lock.inference_id,
        "draft_inference_id": draft.inference_id,
        "resealed": lock.inference_id != draft.inference_id,
        "lock_path": str(lock_path),
        "validation_path": str(validation_path),
        "service_id": lease.service_id,
        "epoch": lease.epoch,
        "stopped": stopped,
        "seconds": round(time.monotonic() - started, 3),
        "probed": validation["probed"],
        "device": req.device,
        "device_choice": req.device_choice,
        "backend_certification": lock.execution.backend_certification,
        "profile": lock.profile,
        "events": events,
    }
