"""A run's trial reservation: the CPU and RAM of the evaluation trial container it serves (spec §8.2, §6.3).

``POST /v1/runs`` may carry ``trial: {"cpus": float, "memory_mb": int}``: the limits the trial's container
runs with (``hitch eval harbor`` gives them to Harbor as the container's own limits). The daemon then

1. before anything starts — before the run is admitted, before a lock is prepared or a service acquired —
   checks that the service *plus this one trial* fits this machine's total capacity
   (:func:`require_room_for_one`): if not, no number of finished trials could ever make room, and the run is
   refused with ``inference_capacity_exceeded`` naming both demands and the capacity;
2. once the service is ready, holds the trial's demand in the resource ledger (holder ``trial:<run-id>``),
   waiting its turn while other trials hold what it needs (:func:`hold`), at most :data:`TRIAL_WAIT_S`
   (a safety net: the trials ahead of it are bounded by their own timeouts); a cancel of the run ends the
   wait at once (``run_cancelled``);
3. gives it back when the run ends.

The holders are visible in ``GET /v1/status`` (``hitch local status --json``: ``resources``).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from harness.app.requests import TRIAL_WAIT_S
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.service.ledger import ResourceLedger, demand_of, trial_demand, trial_holder

__all__ = ["TrialReservation", "hold", "require_room_for_one", "trial_of"]

_MAX_CPUS = 1024.0


@dataclass(frozen=True)
class TrialReservation:
    cpus: float
    memory_mb: int

    def to_json(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "memory_mb": self.memory_mb}


def trial_of(body: dict[str, Any]) -> TrialReservation | None:
    """The body's ``trial`` reservation, checked; None when the run serves no trial container."""
    value = body.get("trial")
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"cpus", "memory_mb"}:
        raise HitchError("usage_error", "trial is {cpus, memory_mb}", {"trial": value})
    cpus, memory_mb = value["cpus"], value["memory_mb"]
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not math.isfinite(cpus) or not 0 < cpus <= _MAX_CPUS:
        raise HitchError("usage_error", f"trial.cpus is a number in (0, {_MAX_CPUS:g}]", {"cpus": cpus})
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 1:
        raise HitchError("usage_error", "trial.memory_mb is a whole number of MiB, at least 1", {"memory_mb": memory_mb})
    if round(cpus * 1000) < 1:
        raise HitchError("usage_error", "trial.cpus is at least 0.001", {"cpus": cpus})
    return TrialReservation(float(cpus), memory_mb)


def require_room_for_one(ledger: ResourceLedger, lock: InferenceLockV1, trial: TrialReservation) -> None:
    """The service of ``lock`` plus one trial must fit the machine's total capacity (spec §8.2), else refuse."""
    service, one = demand_of(lock.resources), trial_demand(trial.cpus, trial.memory_mb)
    if service.plus(one).fits_in(ledger.capacity):
        return
    raise HitchError(
        "inference_capacity_exceeded",
        "the service plus one trial need more than this machine has in total: no trial could ever run; "
        "lower the trial's cpus/memory_mb (the task's [environment]) or the lock's resources",
        {
            "service": service.as_dict(),
            "trial": {**one.as_dict(), **trial.to_json()},
            "capacity": ledger.capacity.as_dict(),
        },
    )


async def hold(ledger: ResourceLedger, run_id: str, trial: TrialReservation, waits: dict[str, asyncio.Task[None]]) -> None:
    """Hold the trial's demand for ``run_id``, waiting its turn; ``waits[run_id]`` is the wait a cancel ends."""
    holder = trial_holder(run_id)
    wait = asyncio.ensure_future(ledger.admit(holder, trial_demand(trial.cpus, trial.memory_mb), TRIAL_WAIT_S))
    waits[run_id] = wait
    try:
        await wait
    except asyncio.CancelledError:
        by_cancel = wait.cancelled()  # else the caller itself is being cancelled
        wait.cancel()  # a pending wait never adds the holder once cancelled; a finished one did: released below
        await ledger.release(holder)
        if not by_cancel:
            raise
        raise HitchError("run_cancelled", f"run {run_id} was cancelled while its trial waited for resources", {}) from None
    finally:
        waits.pop(run_id, None)
