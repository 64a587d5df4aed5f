"""ResourceLedger: impossible admissions fail at once, a shared service counts once, stops give back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.service.ledger import Capacity, ResourceLedger, demand_of
from harness.service.manager import ServiceManager
from tests.harness.service.manager_fakes import FakeStarter, make_lock, run

GIB = 1 << 30


def test_an_admission_that_can_never_fit_fails_at_once() -> None:
    ledger = ResourceLedger(Capacity(cpu_cores=2, memory_bytes=8 * GIB, gpu_count=0, disk_bytes=100 * GIB))

    async def body() -> None:
        # an hour of queue timeout: only an immediate refusal lets this finish
        with pytest.raises(HitchError) as info:
            await ledger.admit("svc#1", Capacity(4, GIB, 0, 0), timeout_s=3600)
        assert info.value.code == "inference_capacity_exceeded"
        assert info.value.details["capacity"]["cpu_cores"] == 2
        with pytest.raises(HitchError) as gpu:
            await ledger.admit("svc#2", Capacity(1, GIB, 1, 0), timeout_s=3600)
        assert gpu.value.code == "inference_capacity_exceeded"
        assert ledger.holders() == {}

    run(body())


def test_an_admission_that_fits_the_total_waits_for_a_release() -> None:
    ledger = ResourceLedger(Capacity(cpu_cores=4, memory_bytes=8 * GIB, gpu_count=0, disk_bytes=GIB))

    async def body() -> None:
        await ledger.admit("a#1", Capacity(3, 4 * GIB, 0, 0), timeout_s=1)
        waiting = asyncio.create_task(ledger.admit("b#1", Capacity(2, GIB, 0, 0), timeout_s=3600))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not waiting.done()
        assert await ledger.release("a#1") is True
        await waiting
        assert list(ledger.holders()) == ["b#1"]
        assert ledger.free == Capacity(2, 7 * GIB, 0, GIB)

    run(body())


def test_an_admission_that_fits_the_total_but_not_the_free_part_times_out() -> None:
    ledger = ResourceLedger(Capacity(cpu_cores=4, memory_bytes=8 * GIB, gpu_count=0, disk_bytes=GIB))

    async def body() -> None:
        await ledger.admit("a#1", Capacity(4, GIB, 0, 0), timeout_s=1)
        with pytest.raises(HitchError) as info:
            await ledger.admit("b#1", Capacity(1, GIB, 0, 0), timeout_s=0.01)
        assert info.value.code == "inference_capacity_exceeded"
        assert info.value.details["free"]["cpu_cores"] == 0
        assert list(ledger.holders()) == ["a#1"]

    run(body())


def test_release_is_idempotent() -> None:
    ledger = ResourceLedger(Capacity(4, GIB, 0, GIB))

    async def body() -> None:
        await ledger.admit("a#1", Capacity(1, 1, 0, 1), timeout_s=1)
        assert await ledger.release("a#1") is True
        assert await ledger.release("a#1") is False
        assert await ledger.release("never") is False
        assert ledger.used == Capacity.zero()

    run(body())


def test_ram_counts_memory_and_shared_memory() -> None:
    lock = make_lock()
    demand = demand_of(lock.resources)
    assert demand.memory_bytes == lock.resources.memory_bytes + lock.resources.shm_bytes
    assert demand.cpu_cores == lock.resources.cpu_cores


def test_machine_capacity_reads_this_machine(tmp_path: Path) -> None:
    capacity = Capacity.from_machine(tmp_path / "not-yet-created", gpu_count=2)
    assert capacity.cpu_cores >= 1 and capacity.memory_bytes > 0 and capacity.disk_bytes > 0
    assert capacity.gpu_count == 2


def _fits_exactly_one(lock_demand: Capacity) -> Capacity:
    return Capacity(lock_demand.cpu_cores, lock_demand.memory_bytes, 0, lock_demand.disk_bytes)


def test_a_shared_service_is_counted_once_and_given_back_after_its_stop(tmp_path: Path) -> None:
    lock = make_lock()
    one = demand_of(lock.resources)
    # exactly one service fits: a second count of the same service would be refused
    ledger = ResourceLedger(_fits_exactly_one(one))
    starter = FakeStarter()
    manager = ServiceManager(HitchRoot(tmp_path / "root"), starter, ledger, events=lambda e: None)

    async def body() -> None:
        leases = await asyncio.gather(*(manager.acquire(lock, f"run-{i}") for i in range(20)))
        assert ledger.used == one
        assert list(ledger.holders()) == [f"{leases[0].service_id}#1"]
        starter.stop_gate = asyncio.Event()
        stopping = asyncio.create_task(manager.stop(leases[0].service_id, force=True))
        for _ in range(10):
            await asyncio.sleep(0)
        assert ledger.used == one  # not before the stop is confirmed
        starter.stop_gate.set()
        assert await stopping is True
        assert ledger.used == Capacity.zero()

    run(body())


def test_manager_refuses_an_impossible_service_without_starting_it(tmp_path: Path) -> None:
    lock = make_lock(queue_timeout_ms=3_600_000)
    ledger = ResourceLedger(Capacity(1, GIB, 0, GIB))
    starter = FakeStarter()
    manager = ServiceManager(HitchRoot(tmp_path / "root"), starter, ledger, events=lambda e: None)

    async def body() -> None:
        with pytest.raises(HitchError) as info:
            await manager.acquire(lock, "run-1")
        assert info.value.code == "inference_capacity_exceeded"
        assert starter.starts == 0 and manager.services() == []

    run(body())


def test_a_second_service_waits_for_the_first_ones_resources(tmp_path: Path) -> None:
    lock_a = make_lock(context=4096)
    lock_b = make_lock(context=2048, queue_timeout_ms=3_600_000)
    need = demand_of(lock_a.resources)
    ledger = ResourceLedger(_fits_exactly_one(need))
    starter = FakeStarter()
    manager = ServiceManager(HitchRoot(tmp_path / "root"), starter, ledger, events=lambda e: None)

    async def body() -> None:
        first = await manager.acquire(lock_a, "run-1")
        second = asyncio.create_task(manager.acquire(lock_b, "run-2"))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not second.done() and starter.starts == 1
        await manager.release(first.lease_id)
        await manager.stop(first.service_id)
        lease = await second
        assert starter.starts == 2 and lease.inference_id == lock_b.inference_id
        await manager.close()

    run(body())
