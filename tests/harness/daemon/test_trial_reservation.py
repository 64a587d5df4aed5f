"""Trial reservations (spec §8.2): the service plus one trial must fit, trials wait their turn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harness.daemon.trial_reservation import TrialReservation, hold, require_room_for_one, trial_of
from harness.errors import HitchError
from harness.service.ledger import Capacity, ResourceLedger, demand_of, trial_demand, trial_holder
from tests.harness.service.manager_fakes import make_lock, run

GIB = 1 << 30
LOCK = make_lock()  # a CPU lock: 4 pinned cores
SERVICE = demand_of(LOCK.resources)


def _machine(memory_bytes: int, cores: int = 4) -> ResourceLedger:
    return ResourceLedger(Capacity.of_cores(cores, memory_bytes, 0, SERVICE.disk_bytes))


@pytest.mark.parametrize(
    "trial",
    [{"cpus": 0, "memory_mb": 512}, {"cpus": "1", "memory_mb": 512}, {"cpus": 1, "memory_mb": 0}, {"cpus": 1},
     {"cpus": 1, "memory_mb": 1.5}, {"cpus": True, "memory_mb": 512}, {"cpus": 1, "memory_mb": 512, "gpus": 1}, [1, 512]],
)  # fmt: skip
def test_a_malformed_trial_reservation_is_a_usage_error(trial: Any) -> None:
    with pytest.raises(HitchError) as info:
        trial_of({"trial": trial})
    assert info.value.code == "usage_error"


def test_a_run_without_a_trial_reserves_nothing() -> None:
    assert trial_of({}) is None
    assert trial_of({"trial": {"cpus": 0.5, "memory_mb": 512}}) == TrialReservation(0.5, 512)


def test_the_service_plus_one_trial_must_fit_the_machine_before_anything_starts() -> None:
    trial = TrialReservation(1.0, 2048)
    fits = _machine(SERVICE.memory_bytes + 2 * GIB)
    require_room_for_one(fits, LOCK, trial)  # exactly the service plus one trial: admitted
    short = _machine(SERVICE.memory_bytes + 2 * GIB - 1)
    with pytest.raises(HitchError) as info:
        require_room_for_one(short, LOCK, trial)
    err = info.value
    assert err.code == "inference_capacity_exceeded"
    assert err.details["service"] == SERVICE.as_dict() and err.details["trial"]["memory_bytes"] == 2 * GIB
    assert err.details["capacity"] == short.capacity.as_dict()
    # a trial's CPU is quota over every core, never a pinned core: a CPU engine on all 4 cores leaves it room,
    # but a trial asking for more cores than the machine has never fits
    require_room_for_one(fits, LOCK, TrialReservation(4.0, 2048))
    with pytest.raises(HitchError) as cpus:
        require_room_for_one(fits, LOCK, TrialReservation(4.5, 2048))
    assert cpus.value.code == "inference_capacity_exceeded"
    assert fits.holders() == {} and short.holders() == {}  # a check, never a hold


def test_trials_beyond_the_machine_wait_their_turn_and_take_it_when_one_ends() -> None:
    ledger = _machine(64 * GIB, cores=4)
    trial = TrialReservation(2.0, 2048)
    waits: dict[str, asyncio.Task[None]] = {}

    async def body() -> None:
        await ledger.admit("svc#1", SERVICE, timeout_s=1)  # the engine: its 4 pinned cores
        await hold(ledger, "t1", trial, waits)
        await hold(ledger, "t2", trial, waits)  # 4 cores of quota: two such trials at once
        third = asyncio.create_task(hold(ledger, "t3", trial, waits))
        while "t3" not in waits:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not third.done() and trial_holder("t3") not in ledger.holders()
        await ledger.release(trial_holder("t1"))
        await third
        assert set(ledger.holders()) == {"svc#1", trial_holder("t2"), trial_holder("t3")}
        assert ledger.used.cpu_quota_millis == 4000 and waits == {}
        assert ledger.holders()[trial_holder("t3")] == trial_demand(2.0, 2048)

    run(body())


def test_a_cancelled_wait_ends_at_once_and_holds_nothing() -> None:
    ledger = _machine(64 * GIB, cores=1)
    waits: dict[str, asyncio.Task[None]] = {}

    async def body() -> None:
        await hold(ledger, "t1", TrialReservation(1.0, 512), waits)
        waiting = asyncio.create_task(hold(ledger, "t2", TrialReservation(1.0, 512), waits))
        while "t2" not in waits:
            await asyncio.sleep(0)
        waits["t2"].cancel()  # what RunService.cancel does for a run whose trial waits
        with pytest.raises(HitchError) as info:
            await waiting
        assert info.value.code == "run_cancelled"
        assert set(ledger.holders()) == {trial_holder("t1")} and waits == {}

    run(body())
