"""Admission: a bounded FIFO with per-run fairness in front of one engine service (spec §8.3).

Owns :class:`FairQueue` and :class:`Permit`. A queue has as many permits as the lock's
``max_running_requests``; a request takes one before it is forwarded and gives it back exactly once
(:meth:`Permit.release` is idempotent and counted). Waiters are kept per run and served round-robin across
runs, FIFO within a run, so one run flooding the queue cannot starve another. A waiter that is not served
within its queue timeout gets ``inference_queue_timeout``; a request finding the queue full (the lock's
``max_queued_requests`` waiting, as the engine's own queue would hold) is refused at once with 429
``inference_queue_full``, so a client sees what the engine itself would answer, never a 200 with an in-band
error.
A waiter cancelled (client gone) leaves the queue; if a permit was handed to it at that instant, the
permit is passed on, never lost.
"""

from __future__ import annotations

import asyncio
from collections import deque

from harness.errors import HitchError

__all__ = ["FairQueue", "Permit"]


class Permit:
    """One running slot; :meth:`release` frees it once, later calls do nothing."""

    __slots__ = ("_queue", "_released")

    def __init__(self, queue: FairQueue) -> None:
        self._queue = queue
        self._released = False

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

    @property
    def in_use(self) -> int:
        return self.permits - self._free

    @property
    def waiting(self) -> int:
        return self._n_waiting

    async def acquire(self, run_id: str, timeout_s: float) -> Permit:
        if self._free > 0 and not self._n_waiting:
            self._free -= 1
            self.acquired += 1
            return Permit(self)
        if self._n_waiting >= self.max_waiting:
            self.refused_full += 1
            raise HitchError(
                "inference_queue_full",
                f"the queue is full ({self.max_waiting} waiting); retry later",
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
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            self._forget(run_id, fut)
            self.timeouts += 1
            raise HitchError(
                "inference_queue_timeout", f"no permit within {timeout_s * 1000:.0f} ms", {"queue_timeout_ms": timeout_s * 1000}
            ) from None
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.acquired += 1  # handed to us as we were cancelled: pass it on
                Permit(self).release()
            else:
                self._forget(run_id, fut)
            raise
        self.acquired += 1
        return Permit(self)

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
