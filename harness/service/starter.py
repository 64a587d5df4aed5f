"""The contract between the :class:`~harness.service.manager.ServiceManager` and whoever starts services.

The manager never imports the supervisor: it calls an injected :data:`ServiceStarter` with a
:class:`StartRequest` and drives the :class:`StartedService` it gets back. Integrating the supervisor is
a thin adapter: one ``ServiceSupervisor`` per epoch, ``on_failure``/``on_released`` wired to the
request's callbacks, ``base_url``/``epoch`` from its endpoint, ``stop`` = ``supervisor.stop()``.
Callers of ``acquire`` get a :class:`LeaseHandle`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.contracts.events import LifecycleEventV1
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError

__all__ = ["EventSink", "LeaseHandle", "ServiceSnapshot", "ServiceStarter", "StartRequest", "StartedService"]


class StartedService(Protocol):
    """What the manager needs from a started, ready service epoch.

    A thin adapter over one ``ServiceSupervisor`` epoch fits it: ``base_url``/``epoch`` from the
    supervisor's endpoint, ``stop`` = ``supervisor.stop()``.
    """

    @property
    def base_url(self) -> str:
        """Where the engine answers, for callers holding a lease."""
        ...

    @property
    def epoch(self) -> int:
        """The epoch the service really runs as (the supervisor's, persisted in ``state.json``)."""
        ...

    async def stop(self, force: bool = False) -> dict[str, Any] | None:
        """Drain (or, with ``force``, end at once) and return only once the stop is confirmed, with details
        of the exit for the manager's ``inference.stopped`` event (or None); raise :class:`HitchError` when
        it cannot be confirmed. Not called after a reported failure."""
        ...


@dataclass(frozen=True)
class StartRequest:
    """One epoch to start, and the two callbacks of its life (supervisor ``on_failure``/``on_released``).

    The starter returns once the service is ready. When it raises, nothing it started may be left
    running; if it cannot confirm that, it raises ``inference_recovery_ambiguous`` and the manager keeps
    the epoch's resources held. Later, the service calls ``on_failure(error)`` when it fails (exit, OOM,
    health) and then stops its engine itself, calling ``on_released()`` once the engine is confirmed
    gone (it may also call it after a normal stop). Both callbacks may be called from any thread.
    ``epoch`` is the manager's proposal; the service's own ``epoch`` wins.
    """

    service_id: str
    epoch: int
    lock: InferenceLockV1
    isolation_key: str
    cache_scope: str
    service_dir: Path
    gpu_uuid: str | None
    on_failure: Callable[[HitchError], None]
    on_released: Callable[[], None]
    run_id: str | None = None  # the run whose acquire began this start (its events name it, spec §12.1)


ServiceStarter = Callable[[StartRequest], Awaitable[StartedService]]
EventSink = Callable[[LifecycleEventV1], None]


@dataclass(frozen=True)
class LeaseHandle:
    """A reference on one service epoch; ``service`` reaches the upstream while the lease is valid."""

    lease_id: str
    service_id: str
    inference_id: str
    isolation_key: str
    epoch: int
    owner: str
    acquired_at: float
    service: StartedService
    run_id: str | None = None  # the run the lease is for (its acquired/released events name it)


@dataclass(frozen=True)
class ServiceSnapshot:
    service_id: str
    inference_id: str
    isolation_key: str
    epoch: int
    state: str
    owners: list[str]
    gpu_uuid: str | None
