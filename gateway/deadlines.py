"""What bounds one request in time: the run's deadline and the lock's timeouts (spec §9.2).

Owns the rules the pipeline applies: a run's candidate deadline (:meth:`gateway.bindings.Binding.time_left`,
from its first request) is spent by waits in the queue, inference and tool time alike. :func:`admit` waits for a
permit no longer than the lock's queue timeout or the deadline's time left (the latter is
``inference_deadline_exceeded``, not ``inference_queue_timeout``); :func:`set_timeout` gives the request
min(time left, the lock's request timeout); :func:`stream_idle_s` is the lock's stream idle timeout (the
profile default for a lock sealed before the field).
"""

from __future__ import annotations

import time

from gateway.admission import FairQueue, Permit
from gateway.bindings import Binding
from gateway.transport import Exchange
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.lock import STREAM_IDLE_TIMEOUT_MS

__all__ = ["admit", "deadline_spent", "set_timeout", "stream_idle_s"]


def deadline_spent(binding: Binding, when: str) -> HitchError:
    return HitchError(
        "inference_deadline_exceeded",
        f"the run's deadline of {binding.record.deadline_s} s was spent {when}",
        {"run_id": binding.run_id, "deadline_s": binding.record.deadline_s},
    )


async def admit(queue: FairQueue, binding: Binding) -> Permit:
    """A permit within the lock's queue timeout, or within what is left of the run's deadline when less."""
    wait = binding.queue_timeout_ms / 1000
    left = binding.time_left(time.monotonic())
    if left is None or left >= wait:
        return await queue.acquire(binding.run_id, wait)
    try:
        return await queue.acquire(binding.run_id, left)
    except HitchError as exc:
        if exc.code == "inference_queue_timeout":
            raise deadline_spent(binding, "while the request waited for the engine") from None
        raise


def set_timeout(ex: Exchange, binding: Binding) -> None:
    """The request's timeout: min(the deadline's time left, the lock's request timeout)."""
    lock_s = binding.target.lock.execution.request_timeout_ms / 1000
    left = binding.time_left(time.monotonic())
    if left is None or left >= lock_s:
        ex.timeout_s = lock_s
    elif left <= 0:
        raise deadline_spent(binding, "while the request waited for the engine")
    else:
        ex.timeout_s, ex.deadline_bound = left, True


def stream_idle_s(lock: InferenceLockV1) -> float:
    return (lock.execution.stream_idle_timeout_ms or STREAM_IDLE_TIMEOUT_MS) / 1000
