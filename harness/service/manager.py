"""The ServiceManager: who may use which engine service, and when it starts and stops (spec §8.2-§9.1).

It owns the table of live services keyed by isolation key (:mod:`harness.service.isolation`), the
leases on them, the idle TTL, and the resources each service holds (:mod:`~harness.service.ledger`,
:mod:`~harness.service.gpu_leases`). Starting and supervising one service is someone else's job: the
manager calls an injected async :data:`ServiceStarter` and drives the :class:`StartedService` it
returns, so the supervisor plugs in through a thin adapter.

Guarantees, all on one event loop (the manager is not thread-safe, except ``on_failure``):

- single flight: concurrent acquires of one isolation key wait for ONE start; a failed start fails all
  of them with the same :class:`HitchError`, and the next acquire starts a new epoch;
- ``release`` is idempotent (a second release, or an unknown lease, returns False);
- once the last lease is released and no acquire is waiting, the idle TTL runs; when it fires the
  service is removed from the table (``draining``) before its stop begins, so an acquire racing the TTL
  either cancels the timer and reuses the service, or waits for the confirmed stop and starts a new
  epoch. Nothing is ever started twice for one key or left running untracked;
- an idle service (ready, no lease, no waiting acquire) yields at once to a start that waits for resources it
  holds: it drains (``inference.draining`` with ``yielded_to``) instead of holding them until its TTL; a service
  with an owner never yields;
- ``stop`` with live leases fails with ``inference_in_use`` unless ``force``, which revokes them;
- a failure reported by the service (``on_failure``) removes it from the table at once and invalidates
  its leases; the failed service stops itself and its resources are released only once it confirms the
  engine is gone (``on_released``). A stop that cannot be confirmed keeps the resources held (and the
  GPU leased) rather than risk double-booking a device; it is reported as ``inference.failed``.

Lifecycle events ``inference.queued/acquired/released/draining/stopped/failed`` carry the run that caused them
(spec §12.1): the acquiring or releasing run, the run whose acquire began a start (and so a failure of that start),
the run whose stop or whose waiting start drained a service; an idle TTL, an operator's stop or an engine's own
failure name none. They go to an event sink, by
default appended to ``<service dir>/events.jsonl`` as :class:`LifecycleEventV1` lines through
:class:`~harness.service.state_store.ServiceStateStore` (the file the supervisor appends to as well).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Literal

from harness.contracts.events import LifecycleEventName, LifecycleEventV1
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.service.gpu_leases import GpuLeases
from harness.service.isolation import ServiceKey, service_key
from harness.service.ledger import ResourceLedger, demand_of
from harness.service.live_service import LiveService, find_service, gpu_memory_needed, holders_view, idle_to_yield
from harness.service.starter import (
    EventSink,
    LeaseHandle,
    ServiceSnapshot,
    ServiceStarter,
    StartedService,
    StartRequest,
)
from harness.service.state_store import ServiceStateStore

__all__ = [
    "MANAGER_OWNER",
    "EventSink",
    "LeaseHandle",
    "ServiceManager",
    "ServiceSnapshot",
    "ServiceStarter",
    "StartRequest",
    "StartedService",
]

# owner_id of events the manager emits on its own behalf (TTL drain, failure, stop).
MANAGER_OWNER = "hitch-manager"


def _as_hitch_error(exc: BaseException, what: str) -> HitchError:
    if isinstance(exc, HitchError):
        return exc
    return HitchError("internal_error", f"{what} raised {type(exc).__name__}", {"error": str(exc)[:500]})


class ServiceManager:
    """Single-flight acquire, leases, idle TTL and stops for every service of one root."""

    def __init__(
        self,
        root: HitchRoot,
        starter: ServiceStarter,
        ledger: ResourceLedger,
        gpu_leases: GpuLeases | None = None,
        clock: Callable[[], float] = time.time,
        *,
        events: EventSink | None = None,
        idle_ttl_ms: int | None = None,
        failure_stop_timeout_s: float = 120.0,
    ) -> None:
        self.root = root
        self.starter = starter
        self.ledger = ledger
        self.gpu_leases = gpu_leases
        self.clock = clock
        self._events = events
        self._idle_ttl_ms = idle_ttl_ms
        self.failure_stop_timeout_s = failure_stop_timeout_s
        self._live: dict[str, LiveService] = {}
        self._stopping: dict[str, LiveService] = {}
        self._leases: dict[str, LiveService] = {}
        self._epochs: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._admitting: dict[str, LiveService] = {}  # starts waiting in the ledger for resources to be free

    # -- public API --------------------------------------------------------------------------------

    async def acquire(
        self, lock: InferenceLockV1, owner: str, cache_scope_owner: str | None = None, *, run_id: str | None = None
    ) -> LeaseHandle:
        """A lease on the ready service for ``lock`` in the caller's cache scope, starting it if needed. ``run_id``
        names the run this acquire is for: its events, and those of a start it begins, carry it."""
        self._loop = asyncio.get_running_loop()
        key = service_key(lock, owner, cache_scope_owner)
        queued = False
        while True:
            svc = self._live.get(key.isolation_key)
            if svc is None:
                fence = self._stopping.get(key.isolation_key)
                if fence is not None:
                    queued = queued or self._emit_queued(fence, owner, "stopping", run_id)
                    await fence.stopped.wait()
                    continue
                svc = self._begin_start(key, lock, run_id)
            self._cancel_ttl(svc)
            if not svc.started.done():
                queued = queued or self._emit_queued(svc, owner, "starting", run_id)
            svc.waiters += 1
            try:
                service = await asyncio.shield(svc.started)
            except asyncio.CancelledError:
                svc.waiters -= 1
                self._maybe_arm_ttl(svc)
                raise
            except BaseException:
                svc.waiters -= 1
                raise
            svc.waiters -= 1
            if svc.state != "ready" or self._live.get(key.isolation_key) is not svc:
                continue  # stopped or failed between ready and now: wait for it, then a new epoch
            lease = LeaseHandle(
                lease_id="lease-" + secrets.token_hex(16),
                service_id=key.service_id,
                inference_id=key.inference_id,
                isolation_key=key.isolation_key,
                epoch=svc.epoch,
                owner=owner,
                acquired_at=self.clock(),
                service=service,
                run_id=run_id,
            )
            svc.leases[lease.lease_id] = lease
            self._leases[lease.lease_id] = svc
            self._emit(svc, "inference.acquired", owner, {"lease_id": lease.lease_id}, run_id)
            return lease

    async def release(self, lease_id: str) -> bool:
        """End a lease; False when it is unknown, already released or revoked (idempotent)."""
        svc = self._leases.pop(lease_id, None)
        if svc is None:
            return False
        lease = svc.leases.pop(lease_id)
        self._emit(svc, "inference.released", lease.owner, {"lease_id": lease_id}, lease.run_id)
        self._maybe_arm_ttl(svc)
        return True

    def is_valid(self, lease_id: str) -> bool:
        """True while the lease is held on a live (not draining, not failed) service."""
        svc = self._leases.get(lease_id)
        return svc is not None and svc.state == "ready"

    async def stop(self, service_id: str, force: bool = False, *, run_id: str | None = None) -> bool:
        """Stop a service and return once the stop is confirmed; False when no such service exists.

        With live leases this fails with ``inference_in_use`` unless ``force``, which revokes them. ``run_id``: the
        run this stop is for (a prepare stopping the engine it started for that run), named on its events.
        """
        while True:
            svc = find_service(self._live, service_id)
            if svc is None:
                fence = find_service(self._stopping, service_id)
                if fence is None:
                    return False
                await fence.stopped.wait()
                return self._raise_stop_error(fence)
            if svc.state == "starting":
                with contextlib.suppress(HitchError):
                    await asyncio.shield(svc.started)
                continue
            if svc.leases and not force:
                raise HitchError(
                    "inference_in_use",
                    f"service {service_id} has {len(svc.leases)} live lease(s)",
                    {"service_id": service_id, "leases": len(svc.leases), "owners": svc.owners()},
                )
            self._begin_stop(svc, "draining", force=force, cause=run_id)
            await svc.stopped.wait()
            return self._raise_stop_error(svc)

    async def close(self, force: bool = True) -> None:
        """Stop every service (leases revoked when ``force``) and wait until each stop is settled."""
        while self._live or self._stopping:
            for svc in list(self._live.values()):
                if svc.state == "starting":
                    with contextlib.suppress(HitchError):
                        await asyncio.shield(svc.started)
                elif svc.leases and not force:
                    raise HitchError("inference_in_use", "services still have live leases", {"service_id": svc.key.service_id})
                else:
                    self._begin_stop(svc, "draining", force=force)
            for fence in list(self._stopping.values()):
                await fence.stopped.wait()

    def services(self) -> list[ServiceSnapshot]:
        """The live services and those still stopping."""
        return [
            ServiceSnapshot(
                svc.key.service_id,
                svc.key.inference_id,
                svc.key.isolation_key,
                svc.epoch,
                svc.state,
                svc.owners(),
                svc.gpu_uuid,
            )
            for svc in [*self._live.values(), *self._stopping.values()]
        ]

    # -- starting ---------------------------------------------------------------------------------

    def _begin_start(self, key: ServiceKey, lock: InferenceLockV1, run_id: str | None) -> LiveService:
        epoch = max(self._epochs.get(key.isolation_key, 0), self._persisted_epoch(key.service_id)) + 1
        self._epochs[key.isolation_key] = epoch
        loop = asyncio.get_running_loop()
        started: asyncio.Future[StartedService] = loop.create_future()
        # A failed start nobody awaits any more must not be logged as "never retrieved".
        started.add_done_callback(lambda f: f.cancelled() or f.exception())
        svc = LiveService(key, lock, epoch, self.root.service_dir(key.service_id), started, cause=run_id)
        self._live[key.isolation_key] = svc
        self._spawn(self._start(svc))
        return svc

    def _persisted_epoch(self, service_id: str) -> int:
        """The epoch the supervisor last recorded, so a new epoch never reuses an old number."""
        try:
            data = json.loads(ServiceStateStore(self.root, service_id).state_path.read_bytes())
        except (OSError, ValueError):
            return 0
        epoch = data.get("epoch") if isinstance(data, dict) else None
        return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 0

    async def _start(self, svc: LiveService) -> None:
        lock = svc.lock
        try:
            holder = f"{svc.key.service_id}#{svc.epoch}"
            self._admitting[svc.key.isolation_key] = svc
            try:
                self._yield_idle(svc)
                await self.ledger.admit(holder, demand_of(lock.resources), lock.execution.queue_timeout_ms / 1000)
            finally:
                self._admitting.pop(svc.key.isolation_key, None)
            svc.holder = holder
            if lock.resources.gpu_count > 0:
                if self.gpu_leases is None:
                    raise HitchError("inference_capacity_exceeded", "the lock needs a GPU and no GPU is managed here", {})
                svc.gpu_uuid = await asyncio.to_thread(
                    self.gpu_leases.acquire, svc.key.service_id, None, memory_bytes=gpu_memory_needed(lock)
                )
            svc.service_dir.mkdir(parents=True, exist_ok=True)
            request = StartRequest(
                service_id=svc.key.service_id,
                epoch=svc.epoch,
                lock=lock,
                isolation_key=svc.key.isolation_key,
                cache_scope=svc.key.cache_scope,
                service_dir=svc.service_dir,
                gpu_uuid=svc.gpu_uuid,
                on_failure=partial(self._threadsafe, self._on_failure, svc),
                on_released=partial(self._threadsafe, self._on_released, svc),
                run_id=svc.cause,
            )
            service = await self.starter(request)
        except BaseException as exc:
            error = _as_hitch_error(exc, "the service starter")
            # The starter's contract: when it raises, nothing it started is running, unless it says
            # it cannot tell, in which case the resources stay held (never double-book a device).
            if error.code != "inference_recovery_ambiguous":
                await self._release_resources(svc)
            svc.state = "failed"
            self._drop_live(svc)
            svc.started.set_exception(error)
            svc.stopped.set()
            if not isinstance(exc, Exception):
                raise
            return
        svc.service = service
        svc.epoch = service.epoch
        self._epochs[svc.key.isolation_key] = max(self._epochs.get(svc.key.isolation_key, 0), svc.epoch)
        if svc.failure is not None:  # reported while still starting: it never becomes usable
            svc.started.set_exception(svc.failure)
            self._begin_stop(svc, "failed", force=True, cause=svc.cause)
            return
        svc.state = "ready"
        svc.started.set_result(service)
        self._maybe_arm_ttl(svc)

    # -- idle TTL, stops, failures ---------------------------------------------------------------

    def _ttl_seconds(self, svc: LiveService) -> float:
        ms = self._idle_ttl_ms if self._idle_ttl_ms is not None else svc.lock.execution.idle_ttl_ms
        return ms / 1000

    def _maybe_arm_ttl(self, svc: LiveService) -> None:
        if svc.state != "ready" or svc.leases or svc.waiters or svc.ttl is not None:
            return
        if self._live.get(svc.key.isolation_key) is not svc:
            return
        svc.idle_since = self.clock()
        svc.ttl = asyncio.get_running_loop().call_later(self._ttl_seconds(svc), self._ttl_fired, svc)
        for waiting in list(self._admitting.values()):  # a start waits for resources: an idle service gives them now
            self._yield_idle(waiting)

    def _yield_idle(self, waiting: LiveService) -> None:
        """Drain the idle services :func:`idle_to_yield` names for ``waiting`` (leased ones are never touched)."""
        for svc in idle_to_yield(waiting, self._live, self._stopping, self.ledger):
            self._begin_stop(svc, "draining", force=False, yielded_to=waiting.key.service_id, cause=waiting.cause)

    def admission_wait(self, service_id: str) -> list[dict[str, Any]] | None:
        """While a start of ``service_id`` waits for resources: who holds them (service, epoch, owners, idle or
        stopping); None when it does not wait."""
        if find_service(self._admitting, service_id) is None:
            return None
        return holders_view(self._live, self._stopping, self.ledger)

    def _cancel_ttl(self, svc: LiveService) -> None:
        if svc.ttl is not None:
            svc.ttl.cancel()
            svc.ttl = None

    def _ttl_fired(self, svc: LiveService) -> None:
        svc.ttl = None
        if svc.state == "ready" and not svc.leases and not svc.waiters and self._live.get(svc.key.isolation_key) is svc:
            self._begin_stop(svc, "draining", force=False)

    def _begin_stop(
        self,
        svc: LiveService,
        state: Literal["draining", "failed"],
        force: bool,
        yielded_to: str | None = None,
        cause: str | None = None,
    ) -> None:
        """Take ``svc`` out of the table now (new acquires wait on it), revoke its leases, stop it. ``cause``: the
        run that caused the stop (None: the TTL, an operator, a failure of the engine itself)."""
        self._cancel_ttl(svc)
        svc.state = state
        svc.stop_cause = cause
        self._drop_live(svc)
        self._stopping[svc.key.isolation_key] = svc
        for lease_id in svc.leases:
            self._leases.pop(lease_id, None)
        revoked = len(svc.leases)
        svc.leases.clear()
        if state == "failed":
            details: dict[str, Any] = {"revoked_leases": revoked}
            if svc.failure is not None:
                details.update(code=svc.failure.code, message=svc.failure.message)
            self._emit(svc, "inference.failed", MANAGER_OWNER, details, cause)
        else:
            drain: dict[str, Any] = {"force": force, "revoked_leases": revoked}
            if yielded_to is not None:  # idle, and a start waited for what it held
                drain["yielded_to"] = yielded_to
            self._emit(svc, "inference.draining", MANAGER_OWNER, drain, cause)
        self._spawn(self._confirm_stop(svc, force))

    async def _confirm_stop(self, svc: LiveService, force: bool) -> None:
        stop_details: dict[str, Any] | None = None
        try:
            assert svc.service is not None
            if svc.state == "failed":
                # The failed service stops itself; only its on_released confirms the engine is gone.
                await self._wait_released(svc)
            else:
                stop_details = await svc.service.stop(force)
        except Exception as exc:
            svc.stop_error = _as_hitch_error(exc, "the service stop")
            self._emit(
                svc,
                "inference.failed",
                MANAGER_OWNER,
                {"code": svc.stop_error.code, "message": "stop not confirmed; its resources stay held"},
                svc.stop_cause,
            )
        else:
            await self._release_resources(svc)
            self._emit(svc, "inference.stopped", MANAGER_OWNER, stop_details or {}, svc.stop_cause)
        finally:
            if self._stopping.get(svc.key.isolation_key) is svc:
                del self._stopping[svc.key.isolation_key]
            svc.stopped.set()

    async def _wait_released(self, svc: LiveService) -> None:
        try:
            await asyncio.wait_for(svc.released.wait(), self.failure_stop_timeout_s)
        except TimeoutError:
            raise HitchError(
                "inference_recovery_ambiguous",
                "the failed service did not confirm its engine is gone",
                {"service_id": svc.key.service_id, "epoch": svc.epoch, "waited_s": self.failure_stop_timeout_s},
            ) from None

    def _threadsafe(self, callback: Callable[..., None], *args: Any) -> None:
        """Run a service callback on the manager's loop, whichever thread the service calls from."""
        loop = self._loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and running is not loop:
            loop.call_soon_threadsafe(callback, *args)
        else:
            callback(*args)

    def _on_released(self, svc: LiveService) -> None:
        svc.released.set()

    def _on_failure(self, svc: LiveService, error: HitchError) -> None:
        if svc.state == "starting":
            svc.failure = svc.failure or error
        elif svc.state == "ready":
            svc.failure = error
            self._begin_stop(svc, "failed", force=True)
        # draining/failed: the stop in progress confirms the end either way.

    async def _release_resources(self, svc: LiveService) -> None:
        if svc.gpu_uuid is not None and self.gpu_leases is not None:
            await asyncio.to_thread(self.gpu_leases.release, svc.gpu_uuid, service_id=svc.key.service_id)
            svc.gpu_uuid = None
        if svc.holder is not None:
            await self.ledger.release(svc.holder)
            svc.holder = None

    # -- helpers ----------------------------------------------------------------------------------

    def _raise_stop_error(self, svc: LiveService) -> bool:
        if svc.stop_error is not None:
            raise svc.stop_error
        return True

    def _drop_live(self, svc: LiveService) -> None:
        if self._live.get(svc.key.isolation_key) is svc:
            del self._live[svc.key.isolation_key]

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _emit_queued(self, svc: LiveService, owner: str, waiting_for: str, run_id: str | None) -> bool:
        self._emit(svc, "inference.queued", owner, {"waiting_for": waiting_for}, run_id)
        return True

    def _emit(
        self, svc: LiveService, name: LifecycleEventName, owner: str, details: dict[str, Any], run_id: str | None = None
    ) -> None:
        event = LifecycleEventV1(
            event=name,
            service_id=svc.key.service_id,
            inference_id=svc.key.inference_id,
            epoch=svc.epoch,
            owner_id=owner,
            timestamp=self.clock(),
            run_id=run_id,
            details=details,
        )
        if self._events is not None:
            self._events(event)
        else:
            ServiceStateStore(self.root, svc.key.service_id).append_event(event)
