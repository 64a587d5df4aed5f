"""Conservative recovery at daemon start (spec §9.3, DESIGN §4 "Recovery").

A daemon that died (SIGKILL, crash) leaves its engines running and their records saying ``starting``,
``ready`` or ``draining``. :func:`recover` runs before the new daemon accepts any acquire:

- every ``inference/services/*/state.json`` is read. A live record whose engine is *confirmed ours*
  (process: the PID is alive with the recorded start time, :func:`is_our_process`; container: it
  carries this root's ``dev.hitch.root`` label and the recorded container id) is stopped — SIGTERM to
  the leader, SIGKILL to its process group after the timeout — and the stop is confirmed; a record
  whose engine is already gone is simply closed. Either way the record becomes ``stopped`` with an
  ``inference.stopped`` event (``recovered: true``), the old engine/admin key files are deleted (the
  next epoch issues new ones) and a GPU lease this root held for it is freed;
- an engine that cannot be confirmed (the PID now belongs to another process or started at another
  time, an unreadable record, a starting record without identity while a process still names the
  service's key file, Docker unreachable for a container record) is *never* signalled: the service is
  quarantined (``quarantine.json``; ``inference.failed`` with ``inference_recovery_ambiguous``) and
  cannot be started until an operator clears it (:func:`clear_quarantine`); its GPU lease stays, so the
  device is quarantined too;
- containers with this root's label that no record names are ours by label and are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from harness.contracts.events import LifecycleEventName, LifecycleEventV1
from harness.contracts.service import InferenceServiceRecordV1, ProcessIdentityV1
from harness.engine.keys import ADMIN_KEY_FILE, API_KEY_FILE, CONFIG_FILE
from harness.errors import HitchError
from harness.launch.oci import list_owned_containers, remove_owned
from harness.launch.process import is_our_process, live_group_members
from harness.paths import HitchRoot, atomic_write_json
from harness.service.gpu_leases import GpuLeases
from harness.service.state_store import STATE_FILE, ServiceStateStore

__all__ = [
    "QUARANTINE_FILE",
    "RECOVERY_OWNER",
    "RecoveryOutcome",
    "clear_quarantine",
    "is_quarantined",
    "quarantine_record",
    "recover",
    "rotate_keys",
]

QUARANTINE_FILE = "quarantine.json"
RECOVERY_OWNER = "hitch-recovery"
_LIVE = ("starting", "ready", "draining")
_KEY_FILES = (API_KEY_FILE, ADMIN_KEY_FILE, CONFIG_FILE, "endpoint.json")
_CONFIRM_S = 10.0

Action = Literal["stopped", "already_gone", "closed", "ambiguous", "removed_orphan"]


@dataclass(frozen=True)
class RecoveryOutcome:
    service_id: str
    action: Action
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def quarantine_record(root: HitchRoot, service_id: str) -> dict[str, Any] | None:
    path = root.service_dir(service_id) / QUARANTINE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"service_id": service_id, "reason": "unreadable quarantine record"}
    return data if isinstance(data, dict) else {"service_id": service_id, "reason": "unreadable quarantine record"}


def is_quarantined(root: HitchRoot, service_id: str) -> bool:
    return (root.service_dir(service_id) / QUARANTINE_FILE).exists()


def _event_on(
    record: InferenceServiceRecordV1, name: LifecycleEventName, owner: str, now: float, details: dict[str, Any]
) -> LifecycleEventV1:
    """An event on ``record``'s service epoch."""
    return LifecycleEventV1(
        event=name,
        service_id=record.service_id,
        inference_id=record.inference_id,
        epoch=record.epoch,
        owner_id=owner,
        timestamp=now,
        details=details,
    )


def _close(store: ServiceStateStore, record: InferenceServiceRecordV1, owner: str, **details: Any) -> None:
    """Record ``record``'s epoch as stopped: the state file, then its ``inference.stopped`` event."""
    now = time.time()
    store.write(record.model_copy(update={"state": "stopped", "updated_at": now}))
    store.append_event(_event_on(record, "inference.stopped", owner, now, details))


def clear_quarantine(root: HitchRoot, service_id: str, owner: str = "operator") -> bool:
    """The operator checked the leftover by hand: the service may start again. True if one was cleared.

    A record still saying starting/ready/draining is closed as ``stopped`` (event ``inference.stopped``
    with ``cleared_by``), and the old keys are deleted, so the next start is a clean new epoch.
    """
    path = root.service_dir(service_id) / QUARANTINE_FILE
    if not path.exists():
        return False
    store = ServiceStateStore(root, service_id)
    try:
        record = store.read()
    except HitchError:
        record = None
        with contextlib.suppress(FileNotFoundError):
            store.state_path.unlink()  # unreadable: the operator vouched for it; start from nothing
    if record is not None and record.state in _LIVE:
        _close(store, record, owner, cleared_by=owner, quarantine_cleared=True)
    rotate_keys(root, service_id)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return True


def rotate_keys(root: HitchRoot, service_id: str) -> list[str]:
    """Delete the service's engine/admin key files (the next epoch issues new ones); returns the names removed."""
    removed = []
    private = root.private / service_id
    for name in _KEY_FILES:
        with contextlib.suppress(FileNotFoundError):
            (private / name).unlink()
            removed.append(name)
    return removed


def _group_members(pgid: int) -> list[int]:
    return live_group_members(pgid)


def _is_ours(identity: ProcessIdentityV1) -> bool:
    return is_our_process(identity)


def _pid_facts(pid: int) -> dict[str, Any]:
    try:
        proc = psutil.Process(pid)
        return {"pid": pid, "alive": True, "start_time": proc.create_time(), "status": proc.status()}
    except psutil.Error:
        return {"pid": pid, "alive": False}


async def _stop_process(identity: ProcessIdentityV1, timeout_s: float) -> bool:
    """SIGTERM the (confirmed) leader, SIGKILL its group after ``timeout_s``; True once nothing is left."""
    pid = identity.pid
    assert pid is not None
    if _is_ours(identity):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and (_is_ours(identity) or _group_members(pid)):
        await asyncio.sleep(0.05)
    if _group_members(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    end = time.monotonic() + _CONFIRM_S
    while time.monotonic() < end:
        if not _is_ours(identity) and not _group_members(pid):
            return True
        await asyncio.sleep(0.05)
    return False


def _processes_naming(path: Path) -> list[int]:
    needle = str(path)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if any(needle in part for part in proc.info["cmdline"] or []):
                found.append(proc.pid)
    return found


class _Recovery:
    def __init__(self, root: HitchRoot, gpu_leases: GpuLeases | None, docker: Any, stop_timeout_s: float) -> None:
        self.root = root
        self.gpu_leases = gpu_leases
        self.docker = docker
        self.stop_timeout_s = stop_timeout_s
        self.containers: dict[str, Any] | None = None
        self.docker_error: str | None = None

    def list_containers(self) -> dict[str, Any] | None:
        """This root's labelled containers by id, or None when Docker cannot be asked."""
        if self.containers is None and self.docker_error is None:
            try:
                self.containers = {c.container_id: c for c in list_owned_containers(self.root.path, client=self.docker)}
            except (HitchError, ImportError) as exc:
                self.docker_error = str(exc)[:300]
        return self.containers

    def remove_containers(self, ids: list[str]) -> None:
        remove_owned(self.root.path, container_ids=ids, timeout_s=self.stop_timeout_s, client=self.docker)

    async def one(self, service_id: str) -> RecoveryOutcome:
        store = ServiceStateStore(self.root, service_id)
        existing = quarantine_record(self.root, service_id)
        if existing is not None:
            return RecoveryOutcome(service_id, "ambiguous", str(existing.get("reason", "quarantined")), existing)
        try:
            record = store.read()
        except HitchError as err:
            return self.ambiguous(service_id, None, "the service record is unreadable", {"error": err.message})
        if record is None:
            return RecoveryOutcome(service_id, "closed", "no record")
        if record.state not in _LIVE:
            rotate_keys(self.root, service_id)
            return RecoveryOutcome(service_id, "closed", f"the record says {record.state}")
        identity = record.process
        if identity is None:
            holders = _processes_naming(self.root.private / service_id / CONFIG_FILE)
            if holders:
                return self.ambiguous(
                    service_id, record, "a starting record has no identity but a process names its key file", {"pids": holders}
                )
            return await self.closed(store, record, "already_gone", "the engine never started")
        if identity.launcher == "process":
            return await self.process(store, record, identity)
        return await self.container(store, record, identity)

    async def process(
        self, store: ServiceStateStore, record: InferenceServiceRecordV1, identity: ProcessIdentityV1
    ) -> RecoveryOutcome:
        sid = record.service_id
        if identity.pid is None or identity.start_time is None:
            return self.ambiguous(sid, record, "the process record has no PID or start time", {})
        if _is_ours(identity):
            if await _stop_process(identity, self.stop_timeout_s):
                return await self.closed(store, record, "stopped", "the leftover engine was stopped", pid=identity.pid)
            return self.ambiguous(sid, record, "the leftover engine survived SIGKILL", {"pid": identity.pid})
        facts = _pid_facts(identity.pid)
        if facts["alive"] and facts.get("status") != psutil.STATUS_ZOMBIE:
            details = {"recorded_start_time": identity.start_time, **facts}
            return self.ambiguous(sid, record, "the recorded PID now belongs to another process (start time differs)", details)
        members = _group_members(identity.pid)
        if members:
            return self.ambiguous(sid, record, "the engine leader is gone but its process group lives on", {"pids": members})
        return await self.closed(store, record, "already_gone", "the engine had already exited", pid=identity.pid)

    async def container(
        self, store: ServiceStateStore, record: InferenceServiceRecordV1, identity: ProcessIdentityV1
    ) -> RecoveryOutcome:
        sid = record.service_id
        containers = await asyncio.to_thread(self.list_containers)
        if containers is None:
            return self.ambiguous(
                sid, record, "Docker cannot be asked about the recorded container", {"error": self.docker_error}
            )
        found = containers.get(identity.container_id or "")
        if found is None:
            return await self.closed(store, record, "already_gone", "the container is gone", container_id=identity.container_id)
        if found.service_id != sid or (identity.image_id and found.image_id != identity.image_id):
            details = {"container_id": found.container_id, "labels_service": found.service_id, "image_id": found.image_id}
            return self.ambiguous(sid, record, "the container's labels or image do not match the record", details)
        await asyncio.to_thread(self.remove_containers, [found.container_id])
        containers.pop(found.container_id, None)
        return await self.closed(
            store, record, "stopped", "the leftover container was stopped and removed", container_id=found.container_id
        )

    async def orphans(self) -> list[RecoveryOutcome]:
        if self.docker is None and self.containers is None:
            return []  # nobody asked for Docker and no record needed it
        containers = await asyncio.to_thread(self.list_containers)
        if not containers:
            return []
        ids = sorted(containers)
        await asyncio.to_thread(self.remove_containers, ids)
        return [
            RecoveryOutcome(
                containers[i].service_id or "?", "removed_orphan", "a container of this root no record names", {"container_id": i}
            )
            for i in ids
        ]

    async def closed(
        self, store: ServiceStateStore, record: InferenceServiceRecordV1, action: Action, reason: str, **details: Any
    ) -> RecoveryOutcome:
        _close(store, record, RECOVERY_OWNER, recovered=True, action=action, reason=reason, **details)
        rotated = rotate_keys(self.root, record.service_id)
        freed = await asyncio.to_thread(self.free_gpu, record)
        return RecoveryOutcome(record.service_id, action, reason, {**details, "keys_removed": rotated, "gpu_freed": freed})

    def free_gpu(self, record: InferenceServiceRecordV1) -> str | None:
        uuid = record.allocation.gpu_uuid
        if uuid is None or self.gpu_leases is None:
            return None
        for st in self.gpu_leases.status():
            held = st.record
            mine = held is not None and held.root == str(self.root.path) and held.service_id == record.service_id
            if st.uuid == uuid and mine and st.state == "stale":
                self.gpu_leases.release(uuid, force=True)  # the engine on it is confirmed gone
                return uuid
        return None

    def ambiguous(
        self, service_id: str, record: InferenceServiceRecordV1 | None, reason: str, details: dict[str, Any]
    ) -> RecoveryOutcome:
        now = time.time()
        body = {
            "service_id": service_id,
            "code": "inference_recovery_ambiguous",
            "reason": reason,
            "details": details,
            "gpu_uuid": record.allocation.gpu_uuid if record is not None else None,
            "quarantined_at": now,
            "action": f"inspect it by hand, then `hitch local unquarantine {service_id}`",
        }
        atomic_write_json(self.root.service_dir(service_id) / QUARANTINE_FILE, body, mode=0o600)
        if record is not None:
            failed = {"code": "inference_recovery_ambiguous", "reason": reason, **details}
            ServiceStateStore(self.root, service_id).append_event(
                _event_on(record, "inference.failed", RECOVERY_OWNER, now, failed)
            )
        return RecoveryOutcome(service_id, "ambiguous", reason, details)


async def recover(
    root: HitchRoot,
    *,
    gpu_leases: GpuLeases | None = None,
    docker_client: Any = None,
    stop_timeout_s: float = 10.0,
) -> list[RecoveryOutcome]:
    """Scan this root's service records (and, when given a client or needed, its containers); see the module doc."""
    work = _Recovery(root, gpu_leases, docker_client, stop_timeout_s)
    outcomes = []
    services = sorted(p.name for p in root.services.iterdir() if (p / STATE_FILE).exists()) if root.services.is_dir() else []
    for service_id in services:
        outcomes.append(await work.one(service_id))
    outcomes.extend(await work.orphans())
    return outcomes
