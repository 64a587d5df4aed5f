"""Admission: the gateway's own bounded FIFO with per-run fairness in front of one engine service (spec §8.3).

Owns :class:`FairQueue` and :class:`Permit`. A queue has as many permits as the lock's
``max_running_requests``; a request takes one before it is forwarded and gives it back exactly once
(:meth:`Permit.release` is idempotent and counted). Waiters are kept per run and served round-robin across
runs, FIFO within a run, so one run flooding the queue cannot starve another (several runs with one request
each are served in arrival order). The queue is the gateway's, not the engine's: its bound (``max_waiting``)
is a gateway setting (:class:`gateway.server.GatewayConfig`), and SGLang's ``--max-queued-requests`` is only
the second boundary behind it (the gateway never sends the engine more than its permits at once).

- A waiter not served within its wait (the lock's queue timeout, or less when the run's deadline ends first)
  gets ``inference_queue_timeout``; the caller names it ``inference_deadline_exceeded`` when the deadline
  was the limit.
- Only a request finding ``max_waiting`` requests already waiting is refused at once: 429
  ``inference_queue_full``.
- A waiter cancelled (its client left) leaves the queue at once; if a permit was handed to it at that instant,
  the permit is passed on, never lost.
- :meth:`FairQueue.fault` stops the queue for good (the service epoch is in fault handling): every waiter and
  every later request gets the fault's error, and a permit released afterwards is not handed on.
  :meth:`FairQueue.drained` waits until only the permits that will never come back (:meth:`Permit.keep`: an
  engine slot that was never confirmed free) are still out.

The queue also counts the requests of its service that are at the engine (:attr:`FairQueue.at_engine`: forwarded
and not yet ended or confirmed aborted), which the abort check compares with the engine's own count.
"""

from __future__ import annotations

import asyncio
from collections import deque

from harness.errors import HitchError

__all__ = ["FairQueue", "Permit"]


class Permit:
    """One running slot; :meth:`release` frees it once, later calls do nothing."""

    __slots__ = ("_queue", "_released", "seq")

    def __init__(self, queue: FairQueue) -> None:
        self._queue = queue
        self._released = False
        queue.acquired += 1
        self.seq = queue.acquired  # the n-th admission of this queue (evidence: the order requests were served)

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> bool:
        if self._released:
            self._queue.repeat_releases += 1
            return False
        self._released = True
        self._queue._hand_on()
        return True

    def keep(self) -> None:
        """This permit never comes back: its engine slot could not be confirmed free (the queue is faulted)."""
        if not self._released:
            self._released = True
            self._queue.kept += 1
            self._queue._changed()


class FairQueue:
    """Permits for one engine service, shared by every run bound to it."""

    def __init__(self, permits: int, max_waiting: int) -> None:
        if permits < 1:
            raise ValueError("a queue needs at least one permit")
        self.permits = permits
        self.max_waiting = max_waiting
        self._free = permits
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._turns: deque[str] = deque()
        self._n_waiting = 0
        self.acquired = 0
        self.released = 0
        self.repeat_releases = 0
        self.timeouts = 0
        self.refused_full = 0
        self.kept = 0  # permits held for good: slots the engine never showed free
        self.at_engine = 0  # requests of this service forwarded and not yet ended (or confirmed aborted)
        self.fault_error: HitchError | None = None
        self._change: asyncio.Event | None = None

    @property
    def in_use(self) -> int:
        return self.permits - self._free

    @property
    def waiting(self) -> int:
        return self._n_waiting

    async def acquire(self, run_id: str, timeout_s: float) -> Permit:
        if self.fault_error is not None:
            raise self._fault_copy()
        if self._free > 0 and not self._n_waiting:
            self._free -= 1
            return Permit(self)
        if self._n_waiting >= self.max_waiting:
            self.refused_full += 1
            raise HitchError(
                "inference_queue_full",
                f"the gateway's queue for this service is full ({self.max_waiting} waiting); retry later",
                {"max_waiting": self.max_waiting},
            )
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self._waiting.get(run_id)
        if line is None:
            line = self._waiting[run_id] = deque()
            self._turns.append(run_id)
        line.append(fut)
        self._n_waiting += 1
        try:
            await asyncio.wait_for(fut, max(timeout_s, 0.0))
        except TimeoutError:
            self._forget(run_id, fut)
            self.timeouts += 1
            raise HitchError(
                "inference_queue_timeout", f"no permit within {timeout_s * 1000:.0f} ms", {"queue_timeout_ms": timeout_s * 1000}
            ) from None
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                Permit(self).release()  # handed to us as we were cancelled: pass it on
            else:
                self._forget(run_id, fut)
            raise
        return Permit(self)

    def fault(self, error: HitchError) -> None:
        """No admission ever again on this queue: every waiter, and every later request, gets ``error``."""
        if self.fault_error is not None:
            return
        self.fault_error = error
        for line in self._waiting.values():
            for fut in line:
                if not fut.done():
                    fut.set_exception(self._fault_copy())
        self._waiting.clear()
        self._turns.clear()
        self._n_waiting = 0
        self._changed()

    async def drained(self, timeout_s: float) -> bool:
        """Wait until every permit still out is one kept for good (in-flight requests ended); whether it did."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self.in_use > self.kept:
            left = end - loop.time()
            if left <= 0:
                return False
            event = self._change = self._change or asyncio.Event()
            try:
                await asyncio.wait_for(event.wait(), left)
            except TimeoutError:
                return False
            event.clear()
        return True

    def _fault_copy(self) -> HitchError:
        err = self.fault_error
        assert err is not None
        return HitchError(err.code, err.message, dict(err.details))

    def _changed(self) -> None:
        if self._change is not None:
            self._change.set()

    def _forget(self, run_id: str, fut: asyncio.Future[None]) -> None:
        line = self._waiting.get(run_id)
        if line is not None and fut in line:
            line.remove(fut)
            self._n_waiting -= 1
            if not line:
                del self._waiting[run_id]
                self._turns.remove(run_id)

    def _hand_on(self) -> None:
        """A permit came back: give it to the next run in turn, or keep it free."""
        self.released += 1
        if self.fault_error is None:
            while self._turns:
                run_id = self._turns.popleft()
                line = self._waiting[run_id]
                fut = line.popleft()
                self._n_waiting -= 1
                if line:
                    self._turns.append(run_id)
                else:
                    del self._waiting[run_id]
                if not fut.done():
                    fut.set_result(None)
                    return
        self._free += 1
        self._changed()
