"""``hitch local prepare`` inside the daemon (spec §5 rule 7, §6.2 "probe, then seal").

The same supervisor path as a real acquire, twice:

1. **probe** — the draft lock starts with its memory budget but without a token pool or prefill sizes
   (``EngineChoice.probe``): SGLang sizes them itself; readiness checks everything else against the draft;
   the values it chose are read from ``/server_info`` (``harness/engine/probe.py``); the probe service stops.
2. **seal** — those values become the lock's numbers (a new ``inference_id`` when they differ from the
   draft's); the sealed lock starts with them passed explicitly and must report them again
   (``inference_lock_mismatch`` otherwise) before it is saved. Every later start is checked the same way.

A pool that cannot hold one full-context request fails prepare (``inference_capacity_exceeded``).

A run that needs a lock not sealed yet prepares it on its way (:func:`prepare_for`, with the run as
``successor``): the verified engine of step 2 *is* the run's engine. Prepare acquires the sealed lock in the
successor's cache scope, and once the lock is saved the successor takes a lease on that same service before
prepare releases its own (spec §5 rule 7: prepare stops only what no other owner holds). A lock's first use
therefore costs two cold starts (probe, verified), and every later one a single start. The probe engine is not
reused: the sealed lock must be shown to reproduce its pool when the numbers are passed explicitly, which is
exactly what the second start verifies. The lifecycle events of a prepare made for a run (``inference.preparing``,
its acquires, starts, releases and stops) carry that run's id (spec §12.1).
``validation.json`` records the draft id, the draft's and the probed values and the readiness timings.
Files go to ``store/inference-locks/sha256/<inference hex>/{lock.json,validation.json}``, each written atomically.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from typing import Any

from harness.app.requests import PrepareRequest
from harness.contracts.events import LifecycleEventName, LifecycleEventV1
from harness.contracts.lock import InferenceLockV1
from harness.devices import probe_cpu
from harness.engine.probe import PROBED_EXECUTION_FIELDS, probed_values, seal_probed
from harness.errors import HitchError
from harness.lock import build_lock, save_sealed_lock, validate_lock
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.service.isolation import service_key
from harness.service.manager import LeaseHandle
from harness.service.starter_supervisor import EngineChoice, SupervisedService
from harness.service.state_store import ServiceStateStore
from harness.store import record_verification, resolve_model, verify_or_quarantine

__all__ = ["prepare", "prepare_for"]


def _service(lease: LeaseHandle) -> SupervisedService:
    service = lease.service
    if not isinstance(service, SupervisedService):
        raise HitchError("internal_error", "prepare needs a supervised service", {})
    return service


async def _release_and_stop(core: Any, lease: LeaseHandle, run_id: str | None) -> bool:
    """Release ``lease``; stop its service now when nobody else holds it (spec §5 rule 7), not after the TTL."""
    await core.release(lease.lease_id)
    if any(s.service_id == lease.service_id and s.owners for s in core.manager.services()):
        return False
    try:
        stopped: bool = await core.stop_service(lease.service_id, force=False, run_id=run_id)
    except HitchError as err:
        if err.code != "inference_in_use":
            raise
        return False
    return stopped


def _event(
    root: HitchRoot, lock: InferenceLockV1, owner: str, run_id: str | None, name: LifecycleEventName, **details: Any
) -> None:
    key = service_key(lock, owner, None)
    ServiceStateStore(root, key.service_id).append_event(
        LifecycleEventV1(
            event=name,
            service_id=key.service_id,
            inference_id=lock.inference_id,
            epoch=0,
            owner_id=owner,
            timestamp=time.time(),
            run_id=run_id,
            details=details,
        )
    )


async def prepare(core: Any, req: PrepareRequest) -> dict[str, Any]:
    """Run the prepare flow on ``core`` (a :class:`~harness.daemon.core.DaemonCore`); its services stop after."""
    result, _ = await prepare_for(core, req)
    return result


async def prepare_for(
    core: Any,
    req: PrepareRequest,
    successor: str | None = None,
    progress: str | None = None,
    cache_scope_owner: str | None = None,
) -> tuple[dict[str, Any], LeaseHandle | None]:
    """Prepare, and with ``successor`` (a run's owner id) hand the verified service over to it: the returned lease
    is the successor's, on the engine that verified the sealed lock, in the successor's cache scope
    (``cache_scope_owner``, default its own). ``progress`` names whose wait the phases are shown for
    (:meth:`~harness.daemon.core.DaemonCore.progress`)."""
    root: HitchRoot = core.root
    choice = req.engine_choice()
    device_choice = req.device_choice.model_dump(mode="json") if req.device_choice is not None else None
    manifest = resolve_model(root, req.model)
    await asyncio.to_thread(verify_or_quarantine, root, manifest)  # a corrupt object is quarantined; nothing starts
    runtime = get_runtime(req.runtime)
    draft = build_lock(
        manifest,
        runtime,
        device=req.device,
        profile=req.profile,
        cpu_cores_per_node=probe_cpu().cores_per_node,
        context_tokens=req.context_tokens,
        sampling=req.generation,
    )
    inflight = core.prepares.get(draft.inference_id)
    if inflight is not None:  # single flight: the same draft is being prepared; its sealed lock is this one's too
        return dict(await asyncio.shield(inflight)), None
    done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    done.add_done_callback(lambda f: f.cancelled() or f.exception())  # nobody else may be waiting for it
    core.prepares[draft.inference_id] = done
    try:
        result, handed = await _prepare_draft(
            core, req, draft, choice, runtime.name, device_choice, successor, progress, cache_scope_owner
        )
    except BaseException as exc:
        done.set_exception(exc if isinstance(exc, Exception) else HitchError("internal_error", "prepare was cancelled", {}))
        raise
    else:
        done.set_result(result)
    finally:
        core.prepares.pop(draft.inference_id, None)
    return result, handed


async def _prepare_draft(
    core: Any,
    req: PrepareRequest,
    draft: InferenceLockV1,
    choice: EngineChoice,
    runtime_name: str,
    device_choice: dict[str, Any] | None,
    successor: str | None,
    progress: str | None,
    cache_scope_owner: str | None = None,
) -> tuple[dict[str, Any], LeaseHandle | None]:
    """Probe ``draft``, seal it, verify the sealed lock; hand the verified service to ``successor`` when given."""
    root: HitchRoot = core.root
    owner = "prepare-" + secrets.token_hex(6)
    preparing: dict[str, Any] = {
        "model": req.model,
        "runtime": runtime_name,
        "backend_certification": draft.execution.backend_certification,
        "device_choice": device_choice or {"device": req.device, "reasons": ["given to the daemon directly"]},
        **choice.to_json(),
    }
    _event(root, draft, owner, successor, "inference.preparing", **preparing, probe=True)
    started = time.monotonic()
    probe_lease: LeaseHandle = await core.acquire(
        draft, owner, dataclasses.replace(choice, probe=True), progress=progress, stage="probe", run_id=successor
    )
    try:
        probed = probed_values(_service(probe_lease).readiness.engine_choices)
    finally:
        probe_stopped = await _release_and_stop(core, probe_lease, successor)
    lock = validate_lock(seal_probed(draft, probed).to_json_dict())
    if lock.inference_id != draft.inference_id:
        _event(root, lock, owner, successor, "inference.preparing", **preparing, resealed_from=draft.inference_id, probed=probed)
    scope = cache_scope_owner or successor  # the verified engine is the successor's: started in its cache scope
    lease: LeaseHandle = await core.acquire(
        lock, owner, choice, cache_scope_owner=scope, progress=progress, stage="verify", run_id=successor
    )
    handed: LeaseHandle | None = None
    try:
        report = _service(lease).readiness
        validation = {
            "schema_version": "1",
            "kind": "inference-validation",
            "inference_id": lock.inference_id,
            "draft_inference_id": draft.inference_id,
            "model_id": lock.model_id,
            "runtime_id": lock.runtime_id,
            "runtime": runtime_name,
            "device": req.device,
            "device_choice": device_choice,
            "backend_certification": lock.execution.backend_certification,
            "profile": lock.profile,
            "engine": choice.engine,
            "launcher": choice.launcher,
            "engine_version": report.engine_version,
            "probed": probed,
            "draft": {field: getattr(draft.execution, field) for field in PROBED_EXECUTION_FIELDS},
            "probe": {"service_id": probe_lease.service_id, "epoch": probe_lease.epoch, "stopped": probe_stopped},
            "reproduced": {"max_total_num_tokens": report.max_total_num_tokens},
            "readiness": {
                "steps": report.steps,
                "health_s": report.health_s,
                "server_info_s": report.server_info_s,
                "responses_s": report.responses_s,
                "stream_s": report.stream_s,
                "idle_wait_s": report.idle_wait_s,
                "busy_polls": report.busy_polls,
                "flush_attempts": report.flush_attempts,
                "flushed_s": report.flushed_s,
                "probe_output_tokens": report.probe_output_tokens,
            },
            "service_id": lease.service_id,
            "epoch": lease.epoch,
            "validated_at": time.time(),
        }
        lock_path, validation_path = save_sealed_lock(root, lock, validation)
        record_verification(root, lock.model_id, lock.inference_id)  # its first start re-hashed the files
        if successor is not None:  # the same service (same lock, the successor's cache scope): ready, no start
            handed = await core.acquire(
                lock, successor, choice, cache_scope_owner=cache_scope_owner, progress=progress, run_id=successor
            )
    finally:
        if handed is not None:
            await core.release(lease.lease_id)
            stopped = False
        else:
            stopped = await _release_and_stop(core, lease, successor)
    events = [e.event for e in ServiceStateStore(root, lease.service_id).events() if e.inference_id == lock.inference_id]
    result = {
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
        "device_choice": device_choice,
        "backend_certification": lock.execution.backend_certification,
        "profile": lock.profile,
        "events": events,
        "handed_over_to": successor if handed is not None else None,
    }
    return result, handed
