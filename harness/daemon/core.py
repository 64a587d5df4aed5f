"""What the daemon does, independent of how it is reached: the manager, recovery, acquire/release, prepare.

:class:`DaemonCore` owns one :class:`ServiceManager` wired to the real :class:`SupervisorStarter`, runs
:func:`~harness.service.recovery.recover` before serving, refuses quarantined services, and implements
``local prepare`` (:mod:`harness.daemon.prepare`). Everything it returns is JSON-ready and secret-free:
a lease names the engine key *file*, never the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contracts.events import LifecycleEventV1
from harness.contracts.lock import InferenceLockV1
from harness.docker_engine import docker_client
from harness.engine.log_phase import engine_log_phase
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.service.gpu_leases import GpuDeviceProvider, GpuLeases
from harness.service.isolation import service_key
from harness.service.ledger import TRIAL_PREFIX, Capacity, ResourceLedger
from harness.service.manager import EventSink, LeaseHandle, ServiceManager
from harness.service.recovery import RecoveryOutcome, clear_quarantine, is_quarantined, quarantine_record, recover
from harness.service.starter_supervisor import EngineChoice, SupervisedService, SupervisorStarter
from harness.service.state_store import ServiceStateStore

_log = logging.getLogger(__name__)

__all__ = ["DaemonConfig", "DaemonCore", "Wait", "lease_json"]


@dataclass(frozen=True)
class DaemonConfig:
    """Knobs of one daemon (tests shorten the TTL and the monitor interval, or fake a GPU inventory)."""

    idle_ttl_ms: int | None = None
    monitor_interval_s: float = 2.0
    capacity: Capacity | None = None
    gpu_provider: GpuDeviceProvider | None = None
    gpu_lease_dir: str | None = None
    stop_timeout_s: float = 30.0
    recover_docker: bool = False  # also sweep this root's labelled containers at start
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Wait:
    """An acquire in progress: the service it waits for, since when."""

    service_id: str
    inference_id: str
    since: float
    stage: str | None = None


def lease_json(lease: LeaseHandle) -> dict[str, Any]:
    service = lease.service
    out: dict[str, Any] = {
        "lease_id": lease.lease_id,
        "service_id": lease.service_id,
        "inference_id": lease.inference_id,
        "epoch": lease.epoch,
        "owner": lease.owner,
        "acquired_at": lease.acquired_at,
        "base_url": service.base_url,
    }
    if isinstance(service, SupervisedService):
        out.update(
            wire_model=service.endpoint.wire_model,
            api_key_file=str(service.endpoint.key_files.api_key),
            engine=service.choice.engine,
            launcher=service.choice.launcher,
            start_attempts=service.attempts,
            ports_refused=service.ports_refused,
        )
    return out


class DaemonCore:
    """The manager of one root plus the daemon's bookkeeping (one event loop)."""

    def __init__(self, root: HitchRoot, config: DaemonConfig | None = None) -> None:
        self.root = root
        self.config = config or DaemonConfig()
        self.started_at = time.time()
        self.choices: dict[str, EngineChoice] = {}
        self.recovery: list[RecoveryOutcome] = []
        cfg = self.config
        self.gpu_leases = (
            GpuLeases(cfg.gpu_provider, root.path, lease_dir=_path(cfg.gpu_lease_dir)) if cfg.gpu_provider is not None else None
        )
        gpus = len(cfg.gpu_provider.gpu_uuids()) if cfg.gpu_provider is not None else 0
        capacity = cfg.capacity or Capacity.from_machine(root.path, gpus)
        self.starter = SupervisorStarter(
            root,
            self._choice,
            owner="hitch-daemon",
            monitor_interval_s=cfg.monitor_interval_s,
            stop_timeout_s=cfg.stop_timeout_s,
        )
        self.event_hooks: list[EventSink] = []  # e.g. the gateway revoking a failed service's bindings
        self.manager = ServiceManager(
            root, self.starter, ResourceLedger(capacity), self.gpu_leases, idle_ttl_ms=cfg.idle_ttl_ms, events=self._event
        )
        self.leases: dict[str, LeaseHandle] = {}
        self.waits: dict[str, Wait] = {}  # acquires in progress, by the key their progress is shown under
        self.prepares: dict[str, asyncio.Future[dict[str, Any]]] = {}  # prepares in progress, by draft inference id

    def _event(self, event: LifecycleEventV1) -> None:
        ServiceStateStore(self.root, event.service_id).append_event(event)
        for hook in self.event_hooks:
            try:
                hook(event)
            except Exception:  # a hook never breaks the manager's bookkeeping
                _log.exception("event hook failed on %s", event.event)

    def _choice(self, lock: InferenceLockV1) -> EngineChoice:
        return self.choices.get(lock.inference_id, EngineChoice())

    async def recover(self) -> list[RecoveryOutcome]:
        docker = None
        if self.config.recover_docker:
            try:
                docker = docker_client()
            except HitchError:
                docker = None
        self.recovery = await recover(
            self.root, gpu_leases=self.gpu_leases, docker_client=docker, stop_timeout_s=min(10.0, self.config.stop_timeout_s)
        )
        return self.recovery

    # -- leases -------------------------------------------------------------------------------------

    async def acquire(
        self,
        lock: InferenceLockV1,
        owner: str,
        choice: EngineChoice,
        cache_scope_owner: str | None = None,
        progress: str | None = None,
        stage: str | None = None,
        run_id: str | None = None,
    ) -> LeaseHandle:
        """A lease for ``owner``; ``progress`` (default: the owner) is the key its wait is shown under, ``stage``
        which start it is (prepare's ``probe`` or ``verify``; None: the service itself); ``run_id`` the run it is
        for (the lifecycle events it causes name it)."""
        key = service_key(lock, owner, cache_scope_owner)
        if is_quarantined(self.root, key.service_id):
            raise HitchError(
                "inference_recovery_ambiguous",
                f"service {key.service_id} is quarantined after an ambiguous recovery",
                {"service_id": key.service_id, "quarantine": quarantine_record(self.root, key.service_id)},
            )
        await self._replace_idle_choice(lock, choice)
        self.choices[lock.inference_id] = choice
        wait = Wait(key.service_id, lock.inference_id, time.time(), stage)
        watch = progress or owner
        self.waits[watch] = wait
        try:
            lease = await self.manager.acquire(lock, owner, cache_scope_owner, run_id=run_id)
        finally:
            if self.waits.get(watch) is wait:
                del self.waits[watch]
        self.leases[lease.lease_id] = lease
        return lease

    async def _replace_idle_choice(self, lock: InferenceLockV1, choice: EngineChoice) -> None:
        """One service per inference id: an idle one of another engine/launcher choice is drained and replaced; one
        that anybody holds (or is starting) keeps running and the ask is refused, naming who holds it."""
        known = self.choices.get(lock.inference_id)
        if known is None or known == choice:
            return
        running = [s for s in self.manager.services() if s.inference_id == lock.inference_id]
        held = [s for s in running if s.owners or s.state == "starting"]
        if held:
            owners = sorted({o for s in held for o in s.owners})
            who = ", ".join(owners) if owners else "a start in progress"
            raise HitchError(
                "inference_service_held",
                f"this lock already runs as {known.engine}/{known.launcher} (service {held[0].service_id}, held by "
                f"{who}); it cannot also run as {choice.engine}/{choice.launcher}",
                {
                    "service_id": held[0].service_id,
                    "owners": owners,
                    "running": known.to_json(),
                    "asked": choice.to_json(),
                    "stop_with": f"hitch local stop {held[0].service_id} --force",
                },
            )
        for snap in running:
            with contextlib.suppress(HitchError):  # gone or taken meanwhile: the manager's acquire decides
                await self.manager.stop(snap.service_id, force=False)

    def progress(self, key: str) -> dict[str, Any]:
        """What the acquire shown under ``key`` waits for now: ``queued`` (behind whom), ``starting`` (elapsed, the
        engine log's path and last line) or ``ready``; ``{"phase": None}`` when nothing waits under that key."""
        wait = self.waits.get(key)
        if wait is None:
            return {"phase": None}
        out: dict[str, Any] = {
            "service_id": wait.service_id,
            "inference_id": wait.inference_id,
            "since": wait.since,
            "stage": wait.stage,
        }
        behind = self.manager.admission_wait(wait.service_id)
        snap = next((s for s in self.manager.services() if s.service_id == wait.service_id), None)
        if behind is not None:
            return {**out, "phase": "queued", "waiting_for": "resources", "behind": behind}
        if snap is None or snap.state in ("draining", "failed"):
            return {**out, "phase": "queued", "waiting_for": "the previous epoch's stop"}
        if snap.state == "ready":
            return {**out, "phase": "ready", "epoch": snap.epoch}
        supervisor = self.starter.supervisors.get(wait.service_id)
        log = supervisor.log_path if supervisor is not None else None
        started = supervisor.started_at if supervisor is not None else None
        return {
            **out,
            "phase": "starting",
            "epoch": snap.epoch,
            "elapsed_s": round(time.time() - started, 1) if started is not None else None,
            "engine_log": str(log) if log is not None else None,
            **engine_log_phase(log),
        }

    async def release(self, lease_id: str) -> bool:
        self.leases.pop(lease_id, None)
        return await self.manager.release(lease_id)

    async def drained(self, timeout_s: float) -> None:
        """Return once no lease is live, waiting up to ``timeout_s``; refuse with ``inference_in_use`` (naming the
        owners) when some still are: a normal ``daemon stop`` never cuts a run."""
        end = time.monotonic() + timeout_s
        while self.leases and time.monotonic() < end:
            await asyncio.sleep(0.2)
        if self.leases:
            owners = sorted({lease.owner for lease in self.leases.values()})
            raise HitchError(
                "inference_in_use",
                f"{len(self.leases)} live lease(s) (owners: {', '.join(owners)}); wait for them "
                "(--drain-timeout S) or stop anyway (--force: their runs end cancelled)",
                {"leases": len(self.leases), "owners": owners, "waited_s": timeout_s},
            )

    async def stop_service(self, service_id: str, force: bool, run_id: str | None = None) -> bool:
        stopped = await self.manager.stop(service_id, force=force, run_id=run_id)
        for lease_id in [k for k, v in self.leases.items() if v.service_id == service_id]:
            self.leases.pop(lease_id, None)
        return stopped

    async def fault_service(self, service_id: str, epoch: int, error: HitchError) -> bool:
        """Fault handling for an epoch the gateway stopped admitting to: its supervisor fails it like a crash
        (``inference.failed``, the engine stopped, resources released once that is confirmed); the next acquire
        starts a new epoch. False when that epoch already ended."""
        supervisor = self.starter.supervisors.get(service_id)
        return supervisor is not None and await supervisor.fault(error, epoch)

    def unquarantine(self, service_id: str) -> bool:
        return clear_quarantine(self.root, service_id)

    # -- views --------------------------------------------------------------------------------------

    def services(self) -> list[dict[str, Any]]:
        out = []
        for snap in self.manager.services():
            leases = [lease_json(lease) for lease in self.leases.values() if lease.service_id == snap.service_id]
            record = ServiceStateStore(self.root, snap.service_id).read()
            out.append(
                {
                    "service_id": snap.service_id,
                    "inference_id": snap.inference_id,
                    "isolation_key": snap.isolation_key,
                    "epoch": snap.epoch,
                    "state": snap.state,
                    "engine_state": record.state if record is not None else None,
                    "owners": snap.owners,
                    "leases": [{"lease_id": x["lease_id"], "owner": x["owner"]} for x in leases],
                    "gpu_uuid": snap.gpu_uuid,
                    "pid": record.process.pid if record is not None and record.process is not None else None,
                    "container_id": record.process.container_id if record is not None and record.process is not None else None,
                    "choice": self.choices[snap.inference_id].to_json() if snap.inference_id in self.choices else None,
                }
            )
        return out

    def quarantined(self) -> list[dict[str, Any]]:
        if not self.root.services.is_dir():
            return []
        found = []
        for path in sorted(self.root.services.iterdir()):
            record = quarantine_record(self.root, path.name)
            if record is not None:
                found.append(record)
        return found

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "root": str(self.root.path),
            "started_at": self.started_at,
            "services": self.services(),
            "quarantined": self.quarantined(),
            "gpus": self.gpus(),
            "resources": self.resources(),
            "recovery": [o.to_json() for o in self.recovery],
        }

    def resources(self) -> dict[str, Any]:
        """The resource ledger: capacity, what is held and free, and each holder (a service epoch or a trial)."""
        ledger = self.manager.ledger
        holders = []
        for holder, amount in sorted(ledger.holders().items()):
            who: dict[str, Any]
            if holder.startswith(TRIAL_PREFIX):
                who = {"kind": "trial", "run_id": holder.removeprefix(TRIAL_PREFIX)}
            else:
                service_id, _, epoch = holder.rpartition("#")
                who = {"kind": "service", "service_id": service_id, "epoch": int(epoch) if epoch.isdigit() else None}
            holders.append({"holder": holder, **who, "held": amount.as_dict()})
        return {
            "capacity": ledger.capacity.as_dict(),
            "used": ledger.used.as_dict(),
            "free": ledger.free.as_dict(),
            "holders": holders,
        }

    def gpus(self) -> list[dict[str, Any]]:
        """Every GPU of the inventory and its lease state; ``foreign`` names PIDs Hitch did not start."""
        if self.gpu_leases is None:
            return []
        try:
            statuses = self.gpu_leases.status()
        except HitchError as exc:
            return [{"error": exc.code, "message": exc.message}]
        return [
            {
                "uuid": st.uuid,
                "state": st.state,
                "service_id": st.record.service_id if st.record is not None else None,
                "root": st.record.root if st.record is not None else None,
                "foreign_pids": list(st.foreign_pids) if st.foreign_pids is not None else None,
            }
            for st in statuses
        ]


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None
