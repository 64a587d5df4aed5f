"""A live run of the daemon, as :class:`harness.daemon.runs.RunService` holds it while it is served.

Owns :class:`LiveRun`: what the daemon knows of a run between its admission and its end (its lease, binding,
service epoch, engine facts, model identity, trial reservation, memory sampler); its durable state is
``runs/<id>/run.json`` (:class:`harness.app.run_store.RunStore`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.contracts.evidence import ModelIdentityV1
from harness.contracts.lock import InferenceLockV1
from harness.daemon.engine_join import EngineJoin
from harness.daemon.engine_memory import EngineMemorySampler
from harness.daemon.run_evidence import EngineFacts
from harness.daemon.trial_reservation import TrialReservation

__all__ = ["LiveRun"]


@dataclass
class LiveRun:
    """A live run of this daemon (its durable state is ``runs/<id>/run.json``)."""

    run_id: str
    lease_id: str | None = None
    binding_id: str | None = None
    service_id: str | None = None
    epoch: int | None = None
    lock: InferenceLockV1 | None = None
    engine_url: str | None = None
    engine_key: str | None = field(default=None, repr=False)
    reused_service: bool = False
    engine: EngineFacts = field(default_factory=EngineFacts)
    eval_image: str | None = None  # a container-facing run: the eval image its probes ran in
    identity: ModelIdentityV1 | None = None  # resolved once the service passed readiness (see _bind)
    trial: TrialReservation | None = None  # the trial container it serves, held in the resource ledger
    memory: EngineMemorySampler | None = None  # the engine's RSS while the run lives (from its lease to its end)
    join: EngineJoin | None = None  # its rows joined to the engine's request lines as they come (from its binding)
