"""The ResourceLedger: admission of engine services and evaluation trials against this machine's capacity (§8.2).

One entry per service *epoch* (a holder), never per lease: a service shared by twenty leases is
counted once. Counted are CPU cores, RAM (``memory_bytes + shm_bytes`` of the lock, since shared
memory is RAM-backed), GPU count and disk bytes. Resources come back through :meth:`release`, which
the manager calls only once the service's stop is confirmed.

A trial container of an evaluation is a holder of its own (``trial:<run-id>``, :func:`trial_holder`;
the daemon admits it for the trial's run, :mod:`harness.daemon.runs`): its RAM limit counts in the same
RAM as the services' (RAM is not shareable), and its CPU limit — a CFS quota (Docker ``cpus``), which
may be fractional — counts in ``cpu_quota_millis``, thousandths of a core against all of this machine's
cores. That is a pool of its own on purpose: an engine's ``cpu_cores`` are the cores its threads are
*pinned* to, while a quota-limited container is time-shared over every core, pinned ones included, so a
CPU engine holding all the cores of a small machine (min(8, cores of one NUMA node)) still leaves the
trials their quota; the quotas of the trials together never exceed the machine's cores.

Admission rules (``admit``):

- a demand that can never fit the *total* capacity fails at once with ``inference_capacity_exceeded``;
  it never waits, since no release could ever make room;
- a demand that fits the total but not what is free right now waits until enough is released, at most
  ``timeout_s`` (the lock's ``queue_timeout_ms``), then fails with ``inference_capacity_exceeded``.

The ledger lives in memory and is not a source of truth across daemon restarts (spec §9.3); recovery
rebuilds it from what it confirms is running.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import asdict, astuple, dataclass
from pathlib import Path

from harness.contracts.lock import ResourceVectorV1
from harness.errors import HitchError

__all__ = ["TRIAL_PREFIX", "Capacity", "ResourceLedger", "demand_of", "trial_demand", "trial_holder"]


@dataclass(frozen=True)
class Capacity:
    """An amount of each counted resource (a machine's capacity, or one service's demand)."""

    cpu_cores: int
    memory_bytes: int
    gpu_count: int
    disk_bytes: int
    cpu_quota_millis: int = 0  # trial containers' CPU quota, in thousandths of a core (see the module docstring)

    def fits_in(self, other: Capacity) -> bool:
        return all(mine <= theirs for mine, theirs in zip(astuple(self), astuple(other), strict=True))

    def plus(self, other: Capacity) -> Capacity:
        return Capacity(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def minus(self, other: Capacity) -> Capacity:
        return Capacity(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def zero(cls) -> Capacity:
        return cls(0, 0, 0, 0, 0)

    @classmethod
    def of_cores(cls, cores: int, memory_bytes: int, gpu_count: int, disk_bytes: int) -> Capacity:
        """A machine of ``cores`` cores: as many pinnable cores, and their whole time as the trials' quota."""
        return cls(cores, memory_bytes, gpu_count, disk_bytes, cores * 1000)

    @classmethod
    def from_machine(cls, root: Path, gpu_count: int = 0) -> Capacity:
        """This machine: ``os.cpu_count()``, ``MemTotal`` of ``/proc/meminfo``, the free disk of ``root``.

        GPUs are not discovered here: the caller passes the count its device provider reports.
        """
        return cls.of_cores(os.cpu_count() or 1, _mem_total_bytes(), gpu_count, _disk_free_bytes(root))


def demand_of(resources: ResourceVectorV1) -> Capacity:
    """What one service epoch of a lock holds in the ledger."""
    return Capacity(
        resources.cpu_cores,
        resources.memory_bytes + resources.shm_bytes,
        resources.gpu_count,
        resources.disk_bytes,
    )


TRIAL_PREFIX = "trial:"


def trial_holder(run_id: str) -> str:
    """The ledger holder of the trial container a run serves."""
    return TRIAL_PREFIX + run_id


def trial_demand(cpus: float, memory_mb: int) -> Capacity:
    """What one trial container holds: its RAM limit, and its CPU limit as quota (never pinned cores)."""
    return Capacity(0, memory_mb * 1024 * 1024, 0, 0, round(cpus * 1000))


def _mem_total_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return int(pages * page_size)


def _disk_free_bytes(root: Path) -> int:
    probe = root.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


class ResourceLedger:
    """Admission against a fixed capacity; all methods run on one event loop."""

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self._held: dict[str, Capacity] = {}
        self._changed: asyncio.Condition | None = None

    @classmethod
    def for_machine(cls, root: Path, gpu_count: int = 0) -> ResourceLedger:
        return cls(Capacity.from_machine(root, gpu_count))

    @property
    def used(self) -> Capacity:
        total = Capacity.zero()
        for amount in self._held.values():
            total = total.plus(amount)
        return total

    @property
    def free(self) -> Capacity:
        return self.capacity.minus(self.used)

    def holders(self) -> dict[str, Capacity]:
        return dict(self._held)

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def admit(self, holder: str, demand: Capacity, timeout_s: float) -> None:
        """Hold ``demand`` for ``holder``, waiting up to ``timeout_s`` for a release to make room.

        Raises ``inference_capacity_exceeded`` at once when ``demand`` exceeds the total capacity
        (it could never fit), or after ``timeout_s`` when it fits the total but not the free part.
        Admitting a holder twice is a programming error.
        """
        if holder in self._held:
            raise RuntimeError(f"ledger holder {holder!r} is already admitted")
        if not demand.fits_in(self.capacity):
            raise HitchError(
                "inference_capacity_exceeded",
                f"{holder} needs more than this machine has in total; it can never be admitted",
                {"holder": holder, "demand": demand.as_dict(), "capacity": self.capacity.as_dict()},
            )
        cond = self._condition()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with cond:
            while not demand.fits_in(self.free):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise HitchError(
                        "inference_capacity_exceeded",
                        f"not enough free resources within the queue timeout ({timeout_s:g} s)",
                        {
                            "holder": holder,
                            "demand": demand.as_dict(),
                            "free": self.free.as_dict(),
                            "capacity": self.capacity.as_dict(),
                            "timeout_s": timeout_s,
                        },
                    )
                try:
                    await asyncio.wait_for(cond.wait(), remaining)
                except TimeoutError:
                    continue
            self._held[holder] = demand

    async def release(self, holder: str) -> bool:
        """Give ``holder``'s resources back; False when it held nothing (idempotent)."""
        if self._held.pop(holder, None) is None:
            return False
        cond = self._condition()
        async with cond:
            cond.notify_all()
        return True
