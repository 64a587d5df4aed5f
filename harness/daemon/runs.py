"""Runs served through the daemon's gateway and their durable lifecycle (terminal statuses: RunRecordV1).

:class:`RunService` owns the daemon's one :class:`~gateway.server.Gateway` (loopback, a free port chosen by
the kernel, its state in the root's private ``inference/gateway/`` directory, 0700) and the live runs.
``POST /v1/runs`` checks the run's harness against the lock it asks for, as the CLI does
(:func:`harness.app.harness_admission.admit_harness`: ``inference_harness_unsupported`` before anything is
written or started), admits the run (``runs/<id>/run.json``: ``admitted``; a harness that needs tool calls, Codex,
on a lock that claims them gets the service's epoch probed with a forced call first,
:class:`harness.daemon.tool_probes.ToolProbes`), prepares its lock and acquires the service
with the run as lease owner (``preparing``), keeps the epoch's readiness
for its evidence (cold start and warm-up when this run started the engine, the tool-call probe) and samples the
engine's RSS until it ends (:mod:`harness.daemon.engine_memory`), reads the engine's ``/server_info`` (keys
removed) and ``/metrics``, and registers the run on the gateway with its own capture (``running``), its rows joined
to the engine's request lines as they come (:mod:`harness.daemon.engine_join`); the upstream comes only
from the manager's service record, the engine key from the service's 0600 key file, and the answer names the
run's 0600 token *file*, never the token. A run id is an idempotency key (:mod:`harness.app.run_identity`):
the same request under a run id that already ended answers its record (``existing``) instead of running again;
another request under a known run id is ``run_conflict``. ``POST /v1/runs/{id}/finish`` (the CLI, with the
harness's status and code), ``/cancel`` (``hitch run cancel``) and ``DELETE`` (``hitch local serve``) end a
run: terminal record first (``failed`` with the engine's code when the engine failed under the run,
:mod:`harness.daemon.run_infra`), then the engine's ``/metrics``, the binding revoked (requests in flight cancelled
unless it completed), the lease released and the execution evidence written
(:mod:`harness.daemon.run_evidence`). At start, runs a dead daemon left live end ``interrupted``; at stop,
live runs end ``interrupted`` too.

A run asked ``for_containers`` (with its ``eval_image``) is served to eval containers: its binding answers
only on the gateway's listener on hitch's eval network (:mod:`harness.daemon.eval_access`), whose
reachability is probed before the run is admitted; its engine is probed unreachable from there before the
binding is registered; the answer names the network (``eval_network``) and a base URL containers can use.

When the manager takes a service out of use (``inference.failed`` after the supervisor's ``on_failure``,
``inference.draining`` on a stop or the idle TTL, ``inference.stopped``), :meth:`RunService.on_event`
revokes every binding of that service at once, so the next request is refused instead of reaching a dead
or draining engine. When the gateway reports a service fault (an abandoned request's engine slot never shown
free: it already stopped admitting to that epoch and let the rest drain), the epoch is failed through its
supervisor like a crash (``inference.failed`` with ``inference_abort_unconfirmed``, engine stopped, bindings
revoked); the next acquire starts a new epoch.

A run may carry a candidate deadline (``deadline_s``: ``hitch run --deadline-s``, a Harbor trial's budget):
the gateway bounds each of its requests by what is left of it (:meth:`gateway.bindings.Binding.time_left`).

The lifecycle events a run causes (the prepare made for it, its service's start, its acquire and release) carry its
run id (spec §12.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from gateway.aborts import ServiceFault
from gateway.bindings import UpstreamTarget
from gateway.capture import RunCapture
from gateway.server import Gateway, GatewayConfig
from harness.app.harness_admission import admit_harness, needs_tool_calls
from harness.app.requests import PrepareRequest, RunRequest
from harness.app.run_identity import new_run_id, require_same_request, run_identity
from harness.app.run_store import RunStore
from harness.contracts.binding import ModelEndpointBindingV1
from harness.contracts.events import LifecycleEventV1
from harness.contracts.evidence import ModelIdentityV1
from harness.contracts.lock import InferenceLockV1
from harness.contracts.run import RunRecordV1, RunStopV1
from harness.contracts.run_readiness import ToolCallProbeV1
from harness.daemon.core import DaemonCore
from harness.daemon.engine_join import EngineJoin
from harness.daemon.engine_memory import EngineMemorySampler
from harness.daemon.eval_access import EvalAccess
from harness.daemon.live_run import LiveRun
from harness.daemon.prepare import prepare_for
from harness.daemon.run_evidence import (
    EngineFacts,
    GatewayFacts,
    facts_after_death,
    model_identity,
    run_readiness,
    scrape_engine,
    write_execution_evidence,
    write_start_facts,
)
from harness.daemon.run_infra import engine_failure
from harness.daemon.tool_probes import ToolProbes
from harness.daemon.trial_reservation import hold, require_room_for_one, trial_of
from harness.devices import probe_cpu
from harness.devices.fingerprint import hardware_fingerprint
from harness.engine.sglang import ENGINE_LOG
from harness.errors import HitchError
from harness.launch.process import isolation_facts
from harness.lock import build_lock, load_sealed_lock, sealed_for_draft
from harness.paths import ensure_private_dir
from harness.runtimes import get_runtime
from harness.service.ledger import trial_holder
from harness.service.manager import LeaseHandle
from harness.service.starter_supervisor import SupervisedService
from harness.service.state_store import ServiceStateStore
from harness.store import model_files_dir, resolve_model, verify_first_start

__all__ = ["REVOKING_EVENTS", "RunService"]

REVOKING_EVENTS = frozenset({"inference.failed", "inference.draining", "inference.stopped"})


# what run.json keeps of the request (as it was given; no secret), and what a prepare of its service takes
_REQUEST_FIELDS = {
    "model", "inference_id", "device", "profile", "runtime", "engine", "launcher", "fake_flags", "image", "capture_max_bytes",
    "device_choice", "for_containers", "eval_image", "trial", "deadline_s", "rerun_of", "harness_artifact", "certifying",
    "cache_scope_owner",
}  # fmt: skip
_SERVICE_FIELDS = {"device", "profile", "engine", "launcher", "image", "fake_flags", "device_choice", "generation"}


class RunService:
    """The daemon's gateway and the runs registered on it (one event loop: the daemon's)."""

    def __init__(self, core: DaemonCore, gateway: Gateway | None = None) -> None:
        self.core = core
        state_dir = core.root.gateway_dir
        self.gateway = gateway or Gateway(GatewayConfig(state_dir=state_dir, host="127.0.0.1", port=0))
        self.runs: dict[str, LiveRun] = {}
        self.store = RunStore(core.root)
        self._hardware: dict[str, dict[str, Any]] = {}
        self.eval_access = EvalAccess(core.root.path, self.gateway)
        self._trial_waits: dict[str, asyncio.Task[None]] = {}  # runs whose trial waits its turn in the ledger
        self.tool_probes = ToolProbes()  # one forced tool call per service epoch
        self.gateway.aborts.on_service_fault = self._service_fault

    async def start(self) -> None:
        # before anything is served: no run of a dead daemon stays live, and each gets its evidence
        for record in self.store.sweep_interrupted():
            await self._evidence_after_death(record)
        await self.gateway.start()

    async def _evidence_after_death(self, record: RunRecordV1) -> None:
        kept = facts_after_death(self.core.root, record.run_id)
        if kept is None or record.inference_id is None:
            return  # it never bound: run.json (interrupted, with its code) is its whole evidence
        binding, engine, identity = kept
        try:
            lock = load_sealed_lock(self.core.root, record.inference_id)
        except HitchError:
            return
        rows = self.gateway.evidence.path_for(binding.binding_id)
        facts = GatewayFacts(rows_file=rows, begun=0, capture_state="complete", writer_failed=False, daemon_died=True)
        await self._write(record, lock, binding, facts, engine, reused_service=False, identity=identity)

    async def stop(self, by: str | None = None) -> None:
        """Daemon shutdown: every live run ends with its evidence, then the gateway stops. An operator's forced
        ``daemon stop`` (``by`` names it) ends them ``cancelled`` (``operator_stop``); a signal, ``interrupted``."""
        if by is not None:
            await self.end_for_operator(None, by)
        err = HitchError("run_interrupted", "the daemon was stopped while this run was live", {})
        for run_id in list(self.runs):
            await self.finish(run_id, "interrupted", err)
        await self.eval_access.close()
        await self.gateway.stop()

    async def end_for_operator(self, service_id: str | None, by: str) -> list[str]:
        """An operator stops ``service_id`` (None: the daemon) under live runs: each run's terminal record first
        (``cancelled``, ``inference_service_stopped``, who and when), then its binding revoked, a stream in flight
        ended with that error event, its lease released. Returns the runs ended."""
        what = "daemon" if service_id is None else "service"
        ended = []
        for run_id, run in list(self.runs.items()):
            if service_id is not None and run.service_id != service_id:
                continue
            stop = RunStopV1(reason="operator_stop", by=by, at=time.time(), what=what)
            target = f"service {service_id}" if service_id is not None else "the daemon"
            err = HitchError("inference_service_stopped", f"an operator stopped {target}", {"run_id": run_id})
            await self.finish(run_id, "cancelled", err, stopped_by=stop)
            ended.append(run_id)
        return ended

    async def _service_fault(self, fault: ServiceFault) -> None:
        """The gateway stopped admitting to an epoch whose engine kept an aborted request's slot: fail it."""
        await self.core.fault_service(fault.service_id, fault.epoch, fault.error)

    def on_event(self, event: LifecycleEventV1) -> None:
        """The manager's event sink hook: a service leaving use revokes all of its bindings."""
        if event.event in REVOKING_EVENTS:
            self.gateway.registry.revoke_service(event.service_id)

    # -- runs ---------------------------------------------------------------------------------------

    def _requested_lock(self, ask: RunRequest) -> tuple[InferenceLockV1, bool]:
        """The lock a run asks for, starting nothing: its pinned sealed lock (True), or the draft of its inputs."""
        if ask.inference_id:
            return load_sealed_lock(self.core.root, ask.inference_id), True
        draft = build_lock(
            resolve_model(self.core.root, str(ask.model)),  # the request names a model and a runtime without an id
            get_runtime(str(ask.runtime)),
            device=ask.device,
            profile=ask.profile,
            cpu_cores_per_node=probe_cpu().cores_per_node,
            sampling=ask.generation,
        )
        return draft, False

    async def _lock_for(self, ask: RunRequest, run_id: str) -> tuple[InferenceLockV1, LeaseHandle | None]:
        """The run's sealed lock; when it had to be prepared first, also the run's lease on the engine that verified
        it (prepare hands its service over: one cold start fewer, :func:`~harness.daemon.prepare.prepare_for`)."""
        lock, pinned = self._requested_lock(ask)
        if pinned:
            return lock, None
        sealed = sealed_for_draft(self.core.root, lock.inference_id)
        if sealed is not None:
            return load_sealed_lock(self.core.root, sealed), None
        service = ask.model_dump(include=_SERVICE_FIELDS, exclude_none=True)
        prepare_ask = PrepareRequest.model_validate({**service, "model": ask.model, "runtime": ask.runtime})
        result, lease = await prepare_for(
            self.core, prepare_ask, successor=run_id, progress=run_id, cache_scope_owner=ask.cache_scope_owner
        )
        return load_sealed_lock(self.core.root, str(result["inference_id"])), lease

    def _check_cancelled(self, run_id: str) -> None:
        record = self.store.read(run_id)
        if record is not None and record.terminal:
            raise HitchError("run_cancelled", f"run {run_id} was {record.status} while it was being prepared", {})

    async def create(self, ask: RunRequest) -> dict[str, Any]:
        """Admit a run; a run id already finished answers its record (``existing``) instead of running again."""
        run_id = ask.run_id or new_run_id()
        trial = trial_of(ask.body())
        identity = run_identity(self.core.root, ask)
        existing = self.store.read(run_id)
        if existing is not None:  # an idempotency key: another request under it is a conflict, live or not
            require_same_request(run_id, existing, identity)
        if run_id in self.runs or (existing is not None and not existing.terminal):
            raise HitchError("run_in_progress", f"run {run_id!r} is live", {"run_id": run_id})
        if existing is not None:
            return {"run_id": run_id, "existing": True, "record": existing.to_json_dict()}
        # the door's own check, as the CLI's: a harness without a passing profile for this lock admits no run
        await asyncio.to_thread(admit_harness, self.core.root, ask)
        if trial is not None:  # before anything starts: the service plus this one trial must fit this machine
            require_room_for_one(self.core.manager.ledger, self._requested_lock(ask)[0], trial)
        if ask.for_containers:  # before anything else starts: containers must reach the gateway where we listen
            await self.eval_access.prepare(ask.eval_image)
        rerun_of = ask.rerun_of
        if rerun_of is not None and not ((found := self.store.read(rerun_of)) and found.terminal):
            raise HitchError("usage_error", "rerun_of names a finished run of this root", {"rerun_of": rerun_of})
        request = ask.model_dump(mode="json", include=_REQUEST_FIELDS, exclude_unset=True)
        self.store.admit(run_id, ask.harness, request, ask.capture, identity)
        if rerun_of is not None:
            self.store.note(run_id, rerun_of=rerun_of)
        run = self.runs[run_id] = LiveRun(run_id, eval_image=ask.eval_image if ask.for_containers else None, trial=trial)
        try:
            return await self._bind(run, ask)
        except BaseException as exc:
            err = exc if isinstance(exc, HitchError) else HitchError("internal_error", f"the run failed: {type(exc).__name__}")
            await self.finish(run_id, "cancelled" if err.code == "run_cancelled" else "failed", err)
            raise

    async def _bind(self, run: LiveRun, ask: RunRequest) -> dict[str, Any]:
        run_id, capture, choice = run.run_id, ask.capture, ask.engine_choice()
        self.store.advance(run_id, "preparing")
        lock, handed = await self._lock_for(ask, run_id)
        run.lock = lock
        if handed is None:  # a lock's first start here re-hashes its model (a prepare made for this run just did)
            await asyncio.to_thread(verify_first_start, self.core.root, lock.model_id, lock.inference_id)
        if handed is not None:  # the engine that verified the sealed lock is this run's: no other start
            run.lease_id, run.service_id = handed.lease_id, handed.service_id
        self._check_cancelled(run_id)
        if handed is None:
            scope = ask.cache_scope_owner  # None: the run's own scope (a radix-cache lock shares nothing then)
            lease = await self.core.acquire(lock, run_id, choice, cache_scope_owner=scope, progress=run_id, run_id=run_id)
            run.lease_id, run.service_id = lease.lease_id, lease.service_id
            self._check_cancelled(run_id)
        else:
            lease = handed
        if run.trial is not None:  # the service is ready: the trial's container waits its turn for CPU and RAM
            await hold(self.core.manager.ledger, run_id, run.trial, self._trial_waits)
            self._check_cancelled(run_id)
        service = lease.service
        if not isinstance(service, SupervisedService):
            raise HitchError("internal_error", "a run needs a supervised service", {})
        endpoint = service.endpoint
        try:
            engine_key = endpoint.key_files.api_key.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise HitchError("inference_process_exited", "the engine key file is gone", {}) from exc
        process = await service.verified_process()
        run.memory = EngineMemorySampler(process)
        await run.memory.start()
        # a cold start is this run's when its acquire (or the prepare made for it) began the epoch's start
        started = endpoint.started_for == run_id
        run.reused_service = not started
        tool: ToolCallProbeV1 | None = None
        required = needs_tool_calls(ask.harness) and lock.protocol.tool_calls
        if required:
            tool = await self.tool_probes.probe(
                endpoint.service_id, endpoint.epoch, endpoint.base_url, engine_key, endpoint.wire_model
            )
        run.engine.readiness = run_readiness(
            endpoint.service_id,
            endpoint.epoch,
            endpoint.readiness,
            endpoint.ready_s,
            started_by_run=started,
            tool_call_required=required,
            tool_call=tool,
        )
        target = UpstreamTarget(
            base_url=endpoint.base_url,
            engine_key=engine_key,
            service_id=endpoint.service_id,
            inference_id=endpoint.inference_id,
            epoch=endpoint.epoch,
            lock=lock,
            wire_model=endpoint.wire_model,
            tokenizer_dir=model_files_dir(self.core.root, lock.model_id),
            process=process,
        )
        run.engine_url, run.engine_key, run.epoch = endpoint.base_url, engine_key, endpoint.epoch
        # the manager's service passed readiness against this lock (verified_process above): the identity is
        # resolved here, by the daemon, from the lock; the request's own words name only what was asked for
        run.identity = model_identity(lock, ask.model, endpoint.wire_model, resolved=True)
        if run.eval_image is not None:
            await self.eval_access.check_engine(run.eval_image, endpoint.service_id, endpoint.epoch, endpoint.base_url)
        try:
            admin_key = endpoint.key_files.admin_key.read_text(encoding="utf-8").strip()
        except OSError:
            admin_key = ""
        info, metrics, errors = await scrape_engine(endpoint.base_url, engine_key, server_info=True, secrets=(admin_key,))
        now = time.time()
        run.engine.server_info, run.engine.server_info_at = info, now
        run.engine.metrics_start = (now, metrics) if metrics is not None else None
        run.engine.errors.extend(f"start {e}" for e in errors)
        self.gateway.registry.set_service_epoch(endpoint.service_id, endpoint.epoch)
        capture_dir = self.core.root.run_inference_dir(run_id) / "capture"
        if capture != "off":
            with contextlib.suppress(OSError):  # a folder that cannot be made fails each capture write: evidence incomplete
                ensure_private_dir(capture_dir)
        own = RunCapture(capture, capture_dir, ask.capture_max_bytes)
        net = self.eval_access.network if run.eval_image is not None else None
        deadline = ask.deadline_s
        record = self.gateway.register(
            run_id,
            target,
            capture=own,
            listen_host=net.gateway_ip if net is not None else None,
            deadline_s=deadline,
        )
        run.binding_id = record.binding_id
        run.join = EngineJoin(self.gateway.evidence.path_for(record.binding_id), self.core.root.service_dir(
            endpoint.service_id) / ENGINE_LOG, ensure_private_dir(self.core.root.run_inference_dir(run_id)))  # fmt: skip
        run.join.start()
        await asyncio.to_thread(write_start_facts, self.core.root, run_id, record, run.engine, run.identity)
        self.store.advance(
            run_id,
            "running",
            inference_id=record.inference_id,
            service_id=record.service_id,
            epoch=record.epoch,
            lease_id=lease.lease_id,
            binding_id=record.binding_id,
        )
        return {
            "run_id": run_id,
            "status": "running",
            "lease_id": lease.lease_id,
            "binding_id": record.binding_id,
            "service_id": record.service_id,
            "inference_id": record.inference_id,
            "epoch": record.epoch,
            "base_url": record.base_url,
            "wire_model": record.wire_model,
            "token_file": record.token_ref,
            "binding": record.to_json_dict(),  # the issued binding: a harness calls its base URL only (spec §10.1)
            "capture": capture,
            **({"for_containers": True, "eval_network": net.name, "eval_network_id": net.network_id} if net is not None else {}),
        }

    async def finish(
        self, run_id: str, status: str, error: HitchError | None, stopped_by: RunStopV1 | None = None
    ) -> dict[str, Any]:
        """End a run: terminal record, engine metrics, binding revoked (in-flight requests cancelled when the
        run did not complete; an operator's stop ends a stream with its error event), lease released, evidence
        written. A run already terminal keeps its status."""
        run = self.runs.pop(run_id, None)
        if run is None:
            found = self.store.read(run_id)
            if found is None:
                raise HitchError("run_not_found", f"no run {run_id!r} in this root", {"run_id": run_id})
            return {"run_id": run_id, "released": False, "record": found.to_json_dict()}
        if status in ("completed", "failed") and run.binding_id is not None:
            failure = await self._engine_failure(run, run.binding_id)
            if failure is not None:  # the engine failed under the run: that is its end, whatever its harness says
                status, error = "failed", failure
        record = self.store.finish(run_id, status, error, stopped_by)  # type: ignore[arg-type]
        if run.memory is not None:  # the last point while the engine still serves the run
            run.engine.memory = await run.memory.stop()
        if run.join is not None:
            await run.join.stop()
        if run.engine_url is not None and run.engine_key is not None:
            _, metrics, errors = await scrape_engine(run.engine_url, run.engine_key, server_info=False)
            if metrics is not None:
                run.engine.metrics_end = (time.time(), metrics)
            run.engine.errors.extend(f"end {e}" for e in errors)
        binding = None
        if run.binding_id is not None:
            if record.status == "completed":
                self.gateway.revoke(run.binding_id)
            else:
                self.gateway.abort(run.binding_id, error if stopped_by is not None else None)
            await self.gateway.settle_evidence(binding_id=run.binding_id)
            found_binding = self.gateway.registry.get(run.binding_id)
            binding = found_binding.record if found_binding is not None else None
        released = await self.core.release(run.lease_id) if run.lease_id is not None else False
        if run.trial is not None:  # its container is gone once its owner ends the run
            await self.core.manager.ledger.release(trial_holder(run_id))
        if binding is not None and run.lock is not None:
            record = await self._write_evidence(run, record, binding)
        elif run.join is not None:
            run.join.abandon()
        if run.binding_id is not None:  # its counts are in the evidence now; a long-lived daemon keeps none
            self.gateway.begun.pop(run.binding_id, None)
            self.gateway.in_flight.pop(run.binding_id, None)
            self.gateway.streams.pop(run.binding_id, None)
        return {"run_id": run_id, "released": released, "record": record.to_json_dict()}

    async def _engine_failure(self, run: LiveRun, binding_id: str) -> HitchError | None:
        await self.gateway.settle_evidence(timeout_s=0.0, binding_id=binding_id)  # the rows so far, on disk
        events: list[LifecycleEventV1] = []
        if run.service_id is not None:
            with contextlib.suppress(HitchError):  # an unreadable events file leaves the verdict to the rows
                events = await asyncio.to_thread(ServiceStateStore(self.core.root, run.service_id).events)
        return engine_failure(self.gateway.evidence.path_for(binding_id), events, run.service_id, run.epoch)

    async def _write_evidence(self, run: LiveRun, record: RunRecordV1, binding: ModelEndpointBindingV1) -> RunRecordV1:
        assert run.lock is not None
        bid = binding.binding_id
        facts = GatewayFacts(
            rows_file=self.gateway.evidence.path_for(bid),
            begun=self.gateway.begun.get(bid, 0),
            capture_state=self.gateway.ledger.state(bid) if record.capture != "off" else "complete",
            writer_failed=bid in self.gateway.evidence.failed,
            tally=self.gateway.evidence.take_tally(bid),  # the rows as written: the ledger needs no second read
            capture_files=segments.files() if (segments := self.gateway.segments.pop(bid, None)) is not None else None,
            join=run.join,
        )
        return await self._write(record, run.lock, binding, facts, run.engine, run.reused_service, run.identity)

    async def _write(
        self,
        record: RunRecordV1,
        lock: InferenceLockV1,
        binding: ModelEndpointBindingV1,
        facts: GatewayFacts,
        engine: EngineFacts,
        reused_service: bool,
        identity: ModelIdentityV1 | None,
    ) -> RunRecordV1:
        device = lock.execution.platform.backend
        if device not in self._hardware:
            self._hardware[device] = await asyncio.to_thread(hardware_fingerprint, device)
        # the service's allocation (its leased GPU, or the CPU cores its engine was pinned to) goes with the hardware
        kept = ServiceStateStore(self.core.root, binding.service_id).read()
        hardware = {**self._hardware[device], "allocation": kept.allocation.to_json_dict() if kept is not None else None}
        if kept is not None and kept.process is not None and kept.process.launcher == "process":
            hardware["isolation"] = isolation_facts(kept.allocation.cpu_cores, lock.resources.memory_bytes)
        execution, ref_digest = await asyncio.to_thread(
            write_execution_evidence, self.core.root, record, lock, binding, facts, engine, hardware, reused_service, identity
        )
        return self.store.note(record.run_id, evidence_complete=execution.complete, ref_digest=ref_digest)

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """``hitch run cancel``: a live run ends ``cancelled``; a finished one answers its record as it is."""
        err = HitchError("run_cancelled", "the run was cancelled (hitch run cancel)", {})
        record = self.store.read(run_id)
        if record is None:
            raise HitchError("run_not_found", f"no run {run_id!r} in this root", {"run_id": run_id})
        run = self.runs.get(run_id)
        if run is not None and run.binding_id is None:
            # still being prepared: mark it now; _bind sees the terminal record and undoes what it took
            record = self.store.finish(run_id, "cancelled", err)
            waiting = self._trial_waits.get(run_id)
            if waiting is not None:  # its trial waits for resources: end the wait now, not when room is made
                waiting.cancel()
            return {"run_id": run_id, "record": record.to_json_dict()}
        return await self.finish(run_id, "cancelled", err)

    async def delete(self, run_id: str) -> dict[str, Any]:
        """The end of a run its owner stopped normally (``hitch local serve`` on SIGINT/SIGTERM)."""
        if run_id not in self.runs:
            return {"run_id": run_id, "deleted": False, "released": False}
        binding_id = self.runs[run_id].binding_id
        out = await self.finish(run_id, "completed", None)
        return {"run_id": run_id, "deleted": True, "released": out["released"], "binding_id": binding_id}

    def view(self) -> list[dict[str, Any]]:
        out = []
        for run in self.runs.values():
            binding = self.gateway.registry.get(run.binding_id) if run.binding_id else None
            state = binding.record.state if binding is not None else "unknown"
            out.append({"run_id": run.run_id, "lease_id": run.lease_id, "binding_id": run.binding_id, "state": state})
        return out
