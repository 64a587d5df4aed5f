"""One live service epoch as the :class:`harness.service.manager.ServiceManager` holds it, and what is read off
the manager's tables without changing them.

Owns :class:`LiveService` (its lock, epoch, state, leases, waiters, idle timer, resource holder, leased GPU and
the runs that caused its start and its stop), :func:`find_service`, :func:`gpu_memory_needed`, and the two
views the manager acts on: :func:`idle_to_yield` (which idle services a waiting start drains) and
:func:`holders_view` (who holds the resources a waiting start needs).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.contracts.lock import CudaPlatformV1, InferenceLockV1
from harness.errors import HitchError
from harness.service.isolation import ServiceKey
from harness.service.ledger import ResourceLedger, demand_of
from harness.service.starter import LeaseHandle, StartedService

__all__ = ["LiveService", "find_service", "gpu_memory_needed", "holders_view", "idle_to_yield"]


@dataclass(eq=False)
class LiveService:
    """One epoch of one service in the tables of the manager (its event loop only)."""

    key: ServiceKey
    lock: InferenceLockV1
    epoch: int
    service_dir: Path
    started: asyncio.Future[StartedService]
    state: Literal["starting", "ready", "draining", "failed"] = "starting"
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    service: StartedService | None = None
    leases: dict[str, LeaseHandle] = field(default_factory=dict)
    waiters: int = 0
    ttl: asyncio.TimerHandle | None = None
    holder: str | None = None
    gpu_uuid: str | None = None
    failure: HitchError | None = None
    stop_error: HitchError | None = None
    released: asyncio.Event = field(default_factory=asyncio.Event)
    idle_since: float | None = None
    cause: str | None = None  # the run whose acquire began this epoch's start (spec §12.1)
    stop_cause: str | None = None  # the run whose stop (or whose waiting start) ended this epoch

    def owners(self) -> list[str]:
        return sorted({lease.owner for lease in self.leases.values()})

    def idle_in(self, live: dict[str, LiveService]) -> bool:
        """Ready, no lease, no waiting acquire, and still the live epoch of its key."""
        return self.state == "ready" and not self.leases and not self.waiters and live.get(self.key.isolation_key) is self


def find_service(table: dict[str, LiveService], service_id: str) -> LiveService | None:
    return next((svc for svc in table.values() if svc.key.service_id == service_id), None)


def gpu_memory_needed(lock: InferenceLockV1) -> int:
    """GPU memory a CUDA lock needs on its device: weights + KV pool within the static fraction SGLang may take."""
    platform = lock.execution.platform
    fraction = platform.mem_fraction_static if isinstance(platform, CudaPlatformV1) else 1.0
    return math.ceil(lock.resources.gpu_memory_bytes / fraction)


def idle_to_yield(
    waiting: LiveService, live: dict[str, LiveService], stopping: dict[str, LiveService], ledger: ResourceLedger
) -> list[LiveService]:
    """The idle services to drain, longest idle first, until what ``waiting`` needs fits in what is free or being
    freed (services already stopping give theirs back once confirmed); none when it fits already, or when draining
    every idle one would not let it start sooner (leased services hold the rest)."""
    need = demand_of(waiting.lock.resources)
    if need.fits_in(ledger.free) or not need.fits_in(ledger.capacity):
        return []
    held = ledger.holders()
    coming = ledger.free
    for stopping_svc in stopping.values():
        if stopping_svc.holder is not None and stopping_svc.holder in held:
            coming = coming.plus(held[stopping_svc.holder])
    idle = sorted(
        (s for s in live.values() if s is not waiting and s.idle_in(live) and s.holder in held),
        key=lambda s: s.idle_since or 0.0,
    )
    reachable = coming
    for svc in idle:
        reachable = reachable.plus(held[str(svc.holder)])
    if not need.fits_in(reachable):
        return []
    chosen = []
    for svc in idle:
        if need.fits_in(coming):
            break
        coming = coming.plus(held[str(svc.holder)])
        chosen.append(svc)
    return chosen


def holders_view(live: dict[str, LiveService], stopping: dict[str, LiveService], ledger: ResourceLedger) -> list[dict[str, Any]]:
    """Every resource holder: its service, state (idle or its own) and owners, when it is one of the manager's."""
    by_holder = {s.holder: s for s in [*live.values(), *stopping.values()] if s.holder is not None}
    out: list[dict[str, Any]] = []
    for holder in sorted(ledger.holders()):
        svc = by_holder.get(holder)
        if svc is None:
            out.append({"holder": holder})
            continue
        state = "idle" if svc.idle_in(live) else svc.state
        out.append({"holder": holder, "service_id": svc.key.service_id, "state": state, "owners": svc.owners()})
    return out
