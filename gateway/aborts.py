"""Abandoned requests: no permit moves on before the engine shows the slot free (spec §9.2: no faked cancel).

Owns :class:`AbandonedRequests` and :class:`ServiceFault`. A request the gateway gave up on after forwarding it
(its client left, a timeout, a size cap: the gateway closed the engine connection, which makes SGLang abort it)
keeps its permit while :func:`gateway.slot_probe.confirm_slot_free` waits, for at most the lock's
``abort_confirm_timeout_ms``, for the engine to show the slot free. Then the permit is handed on and the
exchange's evidence row is written with how long that took (``abort_confirm_ms``, ``abort_outcome``).

An engine that never shows the slot free puts the service epoch into fault handling: the permit is kept for
good (nobody else gets a slot the engine does not have), the epoch's queue admits nothing more (its waiters and
every later request get ``inference_abort_unconfirmed``), the requests still in flight end on their own (drain,
bounded by the lock's request timeout), and then :attr:`AbandonedRequests.on_service_fault` is told: the daemon
fails the epoch through its supervisor and the next acquire starts a new one. The gateway imports nothing of
the service layer; the hook is how the fault leaves it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.admission import FairQueue, Permit
from gateway.engine_http import EnginePool
from gateway.slot_probe import SlotVerdict, confirm_slot_free
from gateway.transport import Exchange
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.lock import ABORT_CONFIRM_TIMEOUT_MS

__all__ = ["AbandonedRequests", "FaultHook", "ServiceFault"]

log = logging.getLogger("gateway.aborts")


@dataclass(frozen=True)
class ServiceFault:
    """A service epoch the gateway stopped admitting to: an abandoned request's slot was never shown free."""

    service_id: str
    epoch: int
    error: HitchError
    drained: bool  # every other request of the epoch ended before the fault was reported


FaultHook = Callable[[ServiceFault], Awaitable[None] | None]


class AbandonedRequests:
    """The abandoned exchanges of one gateway, each waiting for its engine slot's verdict, and the faults."""

    def __init__(self, pool: EnginePool, record: Callable[[Exchange], None], bound_ms: int | None = None) -> None:
        self._pool = pool
        self._record = record  # writes the exchange's evidence row (the gateway's own bookkeeping with it)
        self._bound_ms = bound_ms  # the gateway's override of the lock's abort_confirm_timeout_ms
        self.confirming: dict[str, set[asyncio.Task[None]]] = {}  # per binding
        self.on_service_fault: FaultHook | None = None  # the daemon fails the epoch (harness.daemon.runs)
        self.faults: list[ServiceFault] = []
        self.by_service: Counter[tuple[str, int]] = Counter()  # (service_id, epoch): verdicts still awaited
        self._background: set[asyncio.Future[None]] = set()

    def confirm_later(self, ex: Exchange, permit: Permit, queue: FairQueue) -> None:
        """Take over ``ex``'s permit and evidence row until its engine slot has a verdict."""
        tasks = self.confirming.setdefault(ex.binding.binding_id, set())
        key = (ex.binding.target.service_id, ex.binding.target.epoch)
        self.by_service[key] += 1
        task = asyncio.get_running_loop().create_task(self._confirm(ex, permit, queue))
        tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            tasks.discard(t)
            self.by_service[key] -= 1

        task.add_done_callback(done)

    def pending(self, binding_id: str | None = None) -> list[asyncio.Task[None]]:
        """Verdicts still awaited (of one binding, when given)."""
        return [t for bid, tasks in self.confirming.items() if binding_id in (None, bid) for t in tasks]

    async def cancel(self) -> None:
        """Shutting down: no verdict to wait for; each exchange records its row and lets its permit go."""
        pending = self.pending()
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def bound_ms(self, lock: InferenceLockV1) -> int:
        if self._bound_ms is not None:
            return self._bound_ms
        return lock.execution.abort_confirm_timeout_ms or ABORT_CONFIRM_TIMEOUT_MS

    async def _confirm(self, ex: Exchange, permit: Permit, queue: FairQueue) -> None:
        target = ex.binding.target
        bound_ms = self.bound_ms(target.lock)
        verdict: SlotVerdict | None = None
        fault: HitchError | None = None
        try:
            verdict = await confirm_slot_free(
                self._pool, target.origin, target.engine_key, lambda: queue.at_engine - 1, bound_ms / 1000
            )
        finally:
            if verdict is not None and verdict.outcome == "unconfirmed":
                why = (
                    f"it reports {verdict.engine_load} requests, the gateway sent {queue.at_engine}"
                    if verdict.stale_reads == 0
                    else f"it last reported {verdict.engine_load} requests; the {verdict.stale_reads} reads that showed "
                    "the slot free were load snapshots taken before the request was let go, none since"
                )
                fault = HitchError(
                    "inference_abort_unconfirmed",
                    f"the engine did not show an abandoned request's slot free within {bound_ms} ms ({why})",
                    {
                        "service_id": target.service_id,
                        "epoch": target.epoch,
                        "abort_confirm_timeout_ms": bound_ms,
                        "stale_reads": verdict.stale_reads,  # "free" figures the engine took before the abort
                    },
                )
                permit.keep()  # the slot is not free: nobody else gets it
                queue.fault(fault)  # no new admission on this epoch
                if ex.error_code is None:
                    ex.error_code = fault.code
            else:
                queue.at_engine -= 1
                permit.release()
            if verdict is not None:
                ex.abort_outcome = verdict.outcome
                if verdict.outcome == "free":
                    ex.abort_confirm_ms = round(verdict.waited_ms, 3)
            self._record(ex)
        if fault is not None:
            self._spawn(self._report(ex, queue, fault))

    async def _report(self, ex: Exchange, queue: FairQueue, error: HitchError) -> None:
        """Drain the faulted epoch (requests in flight end on their own), then tell the hook."""
        target = ex.binding.target
        log.warning("service %s epoch %d: %s", target.service_id, target.epoch, error.message)
        drained = await queue.drained(target.lock.execution.request_timeout_ms / 1000)
        fault = ServiceFault(target.service_id, target.epoch, error, drained)
        self.faults.append(fault)
        hook = self.on_service_fault
        if hook is None:
            return
        try:
            result = hook(fault)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("the service fault hook failed for %s epoch %d", target.service_id, target.epoch)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
