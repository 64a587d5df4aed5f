"""Whole-GPU leases by UUID, shared by every HITCH_ROOT of one user (spec §8.2).

A CUDA service holds its GPU exclusively. The lease is one JSON file per GPU UUID in a per-user
directory that every root on the machine sees (``$XDG_RUNTIME_DIR/hitch/gpu-leases``, else
``/tmp/hitch-gpu-leases-<uid>``, or an explicit path), so two roots can never lease the same device.
Each file is a :class:`GpuLeaseRecordV1` ``{root, service_id, pid, pid_start_time, acquired_at}``,
written atomically while holding the directory's file mutex.

A lease is never freed because its holder PID died: a dead holder (or a PID now reused by another
process) means nobody can say whether the engine on that GPU is gone, so the lease is *stale*, the
device is quarantined and leasing reports ``inference_recovery_ambiguous`` until someone who has
checked the device calls ``release(uuid, force=True)``.

The GPU inventory comes from a :class:`GpuDeviceProvider` (NVML in production,
:class:`~harness.devices.gpu_inventory.NvmlGpuInventory`; a fake or a simulated NVML in tests), so this logic
runs and is tested on machines without a GPU. A provider that can also list the processes on a GPU
(:class:`GpuUsageProvider`, as NVML does) lets leasing see load Hitch did not start: a GPU without a lease
but with a foreign process (or whose processes cannot be listed) is reported ``foreign`` and never leased —
Hitch leases whole GPUs exclusively and the lock has no shared mode (spec §8.2); the process is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import filelock
import psutil
from pydantic import Field

from harness.contracts.base import Record, parse_record
from harness.devices.gpu_inventory import GpuUsage
from harness.errors import HitchError
from harness.paths import atomic_write_json, ensure_private_dir
from harness.settings import settings

__all__ = [
    "GpuDeviceProvider",
    "GpuLeaseRecordV1",
    "GpuLeaseStatus",
    "GpuLeases",
    "GpuUsageProvider",
    "default_lease_dir",
    "process_start_time",
]

_UUID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_START_TIME_TOLERANCE_S = 0.05
_MUTEX_TIMEOUT_S = 30.0


class GpuDeviceProvider(Protocol):
    """The GPUs this machine has, by UUID (e.g. ``GPU-8f3a...`` from NVML)."""

    def gpu_uuids(self) -> list[str]: ...


@runtime_checkable
class GpuUsageProvider(Protocol):
    """A provider that also sees, in one read, which processes use each GPU and how much memory it has (NVML)."""

    def gpu_uuids(self) -> list[str]: ...

    def gpu_usage(self) -> dict[str, GpuUsage]: ...


class GpuLeaseRecordV1(Record):
    schema_version: Literal["1"] = "1"
    uuid: str
    root: str
    service_id: str
    pid: int = Field(ge=1, description="the process that holds the lease (the manager)")
    pid_start_time: float = Field(description="psutil create_time of that PID, so a reused PID is not mistaken")
    acquired_at: float


@dataclass(frozen=True)
class GpuLeaseStatus:
    uuid: str
    state: Literal["free", "held", "stale", "foreign"]
    record: GpuLeaseRecordV1 | None
    foreign_pids: tuple[int, ...] | None = ()  # state foreign: the PIDs on it (None: NVML could not list them)


def default_lease_dir() -> Path:
    runtime_dir = settings().xdg_runtime_dir
    if runtime_dir is not None:
        return runtime_dir / "hitch" / "gpu-leases"
    return Path("/tmp") / f"hitch-gpu-leases-{os.getuid()}"


def process_start_time(pid: int) -> float | None:
    """The start time of ``pid``, or None when no such process exists."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def _unleased(uuid: str, usage: dict[str, GpuUsage] | None) -> GpuLeaseStatus:
    """Free, unless a process Hitch did not start uses the GPU (or NVML cannot say)."""
    if usage is None:
        return GpuLeaseStatus(uuid, "free", None)
    seen = usage.get(uuid)
    pids = seen.pids if seen is not None else None
    if pids == ():
        return GpuLeaseStatus(uuid, "free", None)
    return GpuLeaseStatus(uuid, "foreign", None, pids)


def _too_small(statuses: list[GpuLeaseStatus], memory_bytes: int, usage: dict[str, GpuUsage] | None) -> dict[str, int | None]:
    """Free GPUs that cannot hold ``memory_bytes`` (or whose size NVML cannot tell), with their total memory."""
    if memory_bytes <= 0 or usage is None:
        return {}
    found: dict[str, int | None] = {}
    for st in statuses:
        if st.state == "free":
            seen = usage.get(st.uuid)
            total = seen.memory_total_bytes if seen is not None else None
            if total is None or total < memory_bytes:
                found[st.uuid] = total
    return found


def _holder_alive(record: GpuLeaseRecordV1) -> bool:
    started = process_start_time(record.pid)
    return started is not None and abs(started - record.pid_start_time) <= _START_TIME_TOLERANCE_S


class GpuLeases:
    """Leases GPUs for one root; every method takes the shared directory's file mutex."""

    def __init__(
        self,
        provider: GpuDeviceProvider,
        root: Path,
        lease_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.provider = provider
        self.root = str(root)
        self.lease_dir = lease_dir if lease_dir is not None else default_lease_dir()
        self.clock = clock
        self._pid = os.getpid()
        start = process_start_time(self._pid)
        assert start is not None  # our own process always exists
        self._pid_start_time = start

    # -- directory -------------------------------------------------------------------------------

    def _checked_dir(self) -> Path:
        """The lease directory, created 0700; refused when another user owns it or it is a symlink."""
        path = self.lease_dir
        if path.is_symlink():
            raise HitchError("storage_write_failed", "the GPU lease directory is a symlink", {"lease_dir": str(path)})
        ensure_private_dir(path)
        st = path.lstat()
        if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
            raise HitchError(
                "storage_write_failed",
                "the GPU lease directory is not a directory owned by this user",
                {"lease_dir": str(path)},
            )
        return path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Path]:
        path = self._checked_dir()
        try:
            with filelock.FileLock(str(path / ".lock"), timeout=_MUTEX_TIMEOUT_S):
                yield path
        except filelock.Timeout as exc:
            raise HitchError(
                "inference_capacity_exceeded",
                "the GPU lease directory stayed locked by another process",
                {"lease_dir": str(path)},
            ) from exc

    def _file(self, directory: Path, uuid: str) -> Path:
        if not _UUID_RE.match(uuid):
            raise HitchError("usage_error", "not a GPU UUID", {"uuid": uuid})
        return directory / f"{uuid}.json"

    def _read(self, directory: Path, uuid: str) -> GpuLeaseRecordV1 | None:
        path = self._file(directory, uuid)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(raw)
        except ValueError as exc:
            # Unreadable lease: we cannot tell who holds the device, so it stays quarantined.
            raise HitchError(
                "inference_recovery_ambiguous", "a GPU lease file is unreadable", {"uuid": uuid, "path": str(path)}
            ) from exc
        return parse_record(GpuLeaseRecordV1, data, "inference_recovery_ambiguous")

    def _usage(self) -> dict[str, GpuUsage] | None:
        """One read of every GPU's processes and memory; None when the provider cannot see them (--fake-gpu)."""
        return self.provider.gpu_usage() if isinstance(self.provider, GpuUsageProvider) else None

    def _status(self, directory: Path, uuid: str, usage: dict[str, GpuUsage] | None) -> GpuLeaseStatus:
        try:
            record = self._read(directory, uuid)
        except HitchError:
            return GpuLeaseStatus(uuid, "stale", None)
        if record is None:
            return _unleased(uuid, usage)
        return GpuLeaseStatus(uuid, "held" if _holder_alive(record) else "stale", record)

    # -- API -------------------------------------------------------------------------------------

    def status(self) -> list[GpuLeaseStatus]:
        """Every GPU of the provider: free, held (holder alive), stale (quarantined) or foreign (busy, not ours)."""
        with self._locked() as directory:
            usage = self._usage()
            inventory = list(usage) if usage is not None else self.provider.gpu_uuids()
            return [self._status(directory, uuid, usage) for uuid in inventory]

    def acquire(self, service_id: str, uuid: str | None = None, *, memory_bytes: int = 0) -> str:
        """Lease ``uuid`` (or the first free GPU) for ``service_id`` of this root; returns the UUID.

        ``memory_bytes``: what the lock needs on the device; a GPU whose total memory is smaller is never
        leased (capacity is refused before any engine starts, instead of an OOM or a silent downgrade).

        Fails with ``inference_capacity_exceeded`` when every device is held by a live holder or used by a
        foreign process, and with ``inference_recovery_ambiguous`` when the only devices not held live are
        quarantined (stale).
        """
        with self._locked() as directory:
            usage = self._usage()
            inventory = list(usage) if usage is not None else self.provider.gpu_uuids()
            candidates = [uuid] if uuid is not None else inventory
            if uuid is not None and uuid not in inventory:
                raise HitchError("inference_device_unsupported", "no such GPU on this machine", {"uuid": uuid})
            statuses = [self._status(directory, candidate, usage) for candidate in candidates]
            too_small = _too_small(statuses, memory_bytes, usage)
            for st in statuses:
                if st.state == "free" and st.uuid not in too_small:
                    record = GpuLeaseRecordV1(
                        uuid=st.uuid,
                        root=self.root,
                        service_id=service_id,
                        pid=self._pid,
                        pid_start_time=self._pid_start_time,
                        acquired_at=self.clock(),
                    )
                    atomic_write_json(self._file(directory, st.uuid), record.to_json_dict(), mode=0o600)
                    return st.uuid
            stale = [st.uuid for st in statuses if st.state == "stale"]
            foreign = [
                {"uuid": st.uuid, "pids": list(st.foreign_pids) if st.foreign_pids is not None else "unknown"}
                for st in statuses
                if st.state == "foreign"
            ]
            held = [
                {"uuid": st.uuid, "root": st.record.root, "service_id": st.record.service_id}
                for st in statuses
                if st.state == "held" and st.record is not None
            ]
            if stale:
                raise HitchError(
                    "inference_recovery_ambiguous",
                    "the free GPU(s) are quarantined: a lease holder died and nobody confirmed the device is idle",
                    {"quarantined": stale, "held": held, "action": "confirm the device is idle, then force-release its lease"},
                )
            if too_small:
                raise HitchError(
                    "inference_capacity_exceeded",
                    "the lock needs more GPU memory than the free GPU(s) have",
                    {"needed_bytes": memory_bytes, "free_gpus": too_small, "held": held},
                )
            if foreign:
                raise HitchError(
                    "inference_capacity_exceeded",
                    "the free GPU(s) are used by processes Hitch did not start: a GPU is leased only whole and unused",
                    {"foreign": foreign, "held": held, "gpus": len(inventory)},
                )
            raise HitchError(
                "inference_capacity_exceeded",
                "every GPU is leased" if inventory else "this machine has no GPU",
                {"held": held, "gpus": len(inventory)},
            )

    def release(self, uuid: str, *, service_id: str | None = None, force: bool = False) -> bool:
        """Free ``uuid``'s lease; True when a lease file was removed.

        Without ``force`` only this process's own lease for ``service_id`` is freed (anything else
        returns False and stays). ``force`` frees it whoever held it: the caller has confirmed the
        device is idle (this is how a quarantined device is released).
        """
        with self._locked() as directory:
            path = self._file(directory, uuid)
            if not force:
                try:
                    record = self._read(directory, uuid)
                except HitchError:
                    return False
                if record is None or not self._is_ours(record, service_id):
                    return False
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            return True

    def _is_ours(self, record: GpuLeaseRecordV1, service_id: str | None) -> bool:
        return (
            record.root == self.root
            and record.pid == self._pid
            and abs(record.pid_start_time - self._pid_start_time) <= _START_TIME_TOLERANCE_S
            and (service_id is None or record.service_id == service_id)
        )
