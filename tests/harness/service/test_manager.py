"""ServiceManager: single-flight acquire, leases, idle TTL, stop/force, failures, isolation, events.

Hermetic: the starter is :class:`FakeStarter`, which counts live services instead of running engines.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from harness.contracts.events import LifecycleEventV1
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.service.isolation import SHARED_SCOPE, service_key
from harness.service.ledger import ResourceLedger
from harness.service.manager import ServiceManager
from tests.harness.service.manager_fakes import BIG, FakeService, FakeStarter, make_lock, run


def _manager(
    tmp_path: Path, starter: FakeStarter, idle_ttl_ms: int | None = 60_000, events: list[LifecycleEventV1] | None = None
) -> ServiceManager:
    sink = events.append if events is not None else None
    return ServiceManager(HitchRoot(tmp_path / "root"), starter, ResourceLedger(BIG), idle_ttl_ms=idle_ttl_ms, events=sink)


@pytest.fixture
def starter() -> FakeStarter:
    return FakeStarter()


@pytest.fixture
def manager(tmp_path: Path, starter: FakeStarter) -> ServiceManager:
    """The manager most tests use: the fake starter, a 60 s idle TTL, no event sink."""
    return _manager(tmp_path, starter)


def _names(events: list[LifecycleEventV1]) -> list[str]:
    return [e.event for e in events]


def test_twenty_concurrent_acquires_start_exactly_one_service(starter: FakeStarter, manager: ServiceManager) -> None:
    lock = make_lock()

    async def body() -> None:
        starter.start_gate = asyncio.Event()
        tasks = [asyncio.create_task(manager.acquire(lock, f"run-{i}")) for i in range(20)]
        await starter.started_event.wait()
        starter.start_gate.set()
        leases = await asyncio.gather(*tasks)
        assert starter.starts == 1
        assert {lease.service_id for lease in leases} == {leases[0].service_id}
        assert {lease.epoch for lease in leases} == {1}
        assert len({lease.lease_id for lease in leases}) == 20
        assert all(lease.service is leases[0].service for lease in leases)
        assert all(manager.is_valid(lease.lease_id) for lease in leases)
        await manager.close()
        assert starter.live == set()

    run(body())


def test_failed_start_fails_every_waiter_with_the_same_error_and_next_acquire_is_a_new_epoch(
    starter: FakeStarter, manager: ServiceManager
) -> None:
    lock = make_lock()

    async def body() -> None:
        starter.start_gate = asyncio.Event()
        starter.start_error = HitchError("inference_start_timeout", "engine never became ready", {})
        tasks = [asyncio.create_task(manager.acquire(lock, f"run-{i}")) for i in range(5)]
        await starter.started_event.wait()
        starter.start_gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(r is starter.start_error for r in results)
        assert starter.starts == 1
        assert manager.services() == []
        assert manager.ledger.holders() == {}

        starter.start_error = None
        lease = await manager.acquire(lock, "run-retry")
        assert starter.starts == 2
        assert lease.epoch == 2
        assert [r.epoch for r in starter.requests] == [1, 2]
        await manager.close()

    run(body())


def test_different_locks_get_different_services(starter: FakeStarter, manager: ServiceManager) -> None:

    async def body() -> None:
        a = await manager.acquire(make_lock(context=4096), "run-1")
        b = await manager.acquire(make_lock(context=2048), "run-1")
        assert a.inference_id != b.inference_id
        assert a.service_id != b.service_id
        assert starter.starts == 2
        assert len(starter.live) == 2
        await manager.close()

    run(body())


def test_throughput_cache_scopes_never_share_a_service_and_one_scope_shares(
    starter: FakeStarter, manager: ServiceManager
) -> None:
    lock = make_lock("throughput")

    async def body() -> None:
        a1 = await manager.acquire(lock, "trial-1", cache_scope_owner="eval-A")
        a2 = await manager.acquire(lock, "trial-2", cache_scope_owner="eval-A")
        b1 = await manager.acquire(lock, "trial-3", cache_scope_owner="eval-B")
        assert a1.service_id == a2.service_id and a1.service is a2.service
        assert b1.service_id != a1.service_id
        assert a1.isolation_key != b1.isolation_key
        assert starter.starts == 2
        scopes = sorted(r.cache_scope for r in starter.requests)
        assert scopes == ["owner:eval-A", "owner:eval-B"]
        # without a scope owner, a radix-cache acquire is scoped to its own owner
        c1 = await manager.acquire(lock, "run-x")
        c2 = await manager.acquire(lock, "run-y")
        assert c1.service_id != c2.service_id
        await manager.close()

    run(body())


def test_baseline_without_prefix_cache_shares_one_service_across_scopes(starter: FakeStarter, manager: ServiceManager) -> None:
    lock = make_lock("baseline")
    assert service_key(lock, "a", "eval-A").cache_scope == SHARED_SCOPE

    async def body() -> None:
        a = await manager.acquire(lock, "run-1", cache_scope_owner="eval-A")
        b = await manager.acquire(lock, "run-2", cache_scope_owner="eval-B")
        assert a.service_id == b.service_id
        assert starter.starts == 1
        await manager.close()

    run(body())


def test_double_release_releases_once_and_unknown_lease_is_not_an_error(tmp_path: Path) -> None:
    starter = FakeStarter()
    events: list[LifecycleEventV1] = []
    manager = _manager(tmp_path, starter, events=events)

    async def body() -> None:
        lease = await manager.acquire(make_lock(), "run-1")
        other = await manager.acquire(make_lock(), "run-2")
        assert await manager.release(lease.lease_id) is True
        assert await manager.release(lease.lease_id) is False
        assert await manager.release("lease-unknown") is False
        assert not manager.is_valid(lease.lease_id)
        assert manager.is_valid(other.lease_id)
        released = [e for e in events if e.event == "inference.released"]
        assert len(released) == 1 and released[0].owner_id == "run-1"
        assert manager.services()[0].owners == ["run-2"]
        await manager.close()

    run(body())


def test_idle_ttl_stops_the_service_exactly_once(tmp_path: Path) -> None:
    starter = FakeStarter()
    events: list[LifecycleEventV1] = []
    manager = _manager(tmp_path, starter, idle_ttl_ms=1, events=events)

    async def body() -> None:
        lease = await manager.acquire(make_lock(), "run-1")
        assert await manager.release(lease.lease_id)
        await starter.wait_stops(1)
        for _ in range(5):
            await asyncio.sleep(0)
        assert starter.stop_calls == 1 and starter.double_stops == 0
        assert starter.stop_forces == [False]  # an idle stop drains gracefully
        assert starter.live == set()
        assert manager.services() == []
        assert manager.ledger.holders() == {}
        assert _names(events)[-3:] == ["inference.released", "inference.draining", "inference.stopped"]

    run(body())


def test_idle_ttl_comes_from_the_lock_when_not_overridden(tmp_path: Path) -> None:
    starter = FakeStarter()
    manager = _manager(tmp_path, starter, idle_ttl_ms=None)

    async def body() -> None:
        lease = await manager.acquire(make_lock(idle_ttl_ms=1), "run-1")
        await manager.release(lease.lease_id)
        await starter.wait_stops(1)
        assert manager.services() == []

    run(body())


def test_ttl_racing_new_acquires_never_leaks_or_double_stops(tmp_path: Path) -> None:
    """Acquire right around the moment the TTL fires, many times over, from several tasks at once.

    The TTL is 0 ms, so it fires on the next loop turn after the last release; each acquire yields a
    varying number of turns first, landing before the timer, on it, during the drain, or after the stop.
    """
    starter = FakeStarter()
    manager = _manager(tmp_path, starter, idle_ttl_ms=0)
    lock = make_lock()

    async def worker(n: int) -> None:
        for i in range(60):
            lease = await manager.acquire(lock, f"w{n}")
            # the lease always points at a live, never-stopped service, and at most one exists
            service = lease.service
            assert isinstance(service, FakeService)
            assert service in starter.live and not service.stopped
            assert len(starter.live) == 1
            for _ in range((i * (n + 1)) % 7):
                await asyncio.sleep(0)
            assert await manager.release(lease.lease_id)
            for _ in range((i + n) % 5):
                await asyncio.sleep(0)

    async def body() -> None:
        await worker(0)  # alone: every release leaves the service idle, so the TTL keeps firing
        solo_starts = starter.starts
        await asyncio.gather(*(worker(n) for n in range(4)))  # together: leases overlap the timer
        await manager.close()
        assert starter.double_stops == 0
        assert starter.live == set()
        assert starter.max_live == 1
        assert starter.stop_calls == starter.starts == len(starter.stopped_services)
        epochs = [r.epoch for r in starter.requests]
        assert epochs == list(range(1, len(epochs) + 1))
        assert solo_starts > 1  # the TTL really fired in between
        assert manager.services() == [] and manager.ledger.holders() == {}

    run(body())


def test_acquire_during_draining_waits_for_the_stop_and_starts_a_new_epoch(tmp_path: Path) -> None:
    starter = FakeStarter()
    manager = _manager(tmp_path, starter, idle_ttl_ms=0)
    lock = make_lock()

    async def body() -> None:
        starter.stop_gate = asyncio.Event()
        first = await manager.acquire(lock, "run-1")
        await manager.release(first.lease_id)
        while starter.stop_calls == 0:  # the TTL fired and the (held) stop began
            await asyncio.sleep(0)
        waiting = asyncio.create_task(manager.acquire(lock, "run-2"))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not waiting.done()
        assert starter.starts == 1  # nothing new starts while the old epoch is still stopping
        starter.stop_gate.set()
        second = await waiting
        assert second.epoch == 2 and second.service is not first.service
        assert starter.live == {second.service}
        await manager.close()
        assert starter.double_stops == 0 and starter.live == set()

    run(body())


def test_stop_with_live_leases_is_in_use_unless_forced(starter: FakeStarter, manager: ServiceManager) -> None:

    async def body() -> None:
        lease = await manager.acquire(make_lock(), "run-1")
        with pytest.raises(HitchError) as info:
            await manager.stop(lease.service_id)
        assert info.value.code == "inference_in_use"
        assert info.value.details["owners"] == ["run-1"]
        assert starter.live and starter.stop_calls == 0

        assert await manager.stop(lease.service_id, force=True) is True
        assert starter.live == set() and starter.stop_forces == [True]
        assert not manager.is_valid(lease.lease_id)
        assert await manager.release(lease.lease_id) is False  # revoked
        assert await manager.stop(lease.service_id) is False  # nothing left to stop
        again = await manager.acquire(make_lock(), "run-1")
        assert again.epoch == 2
        await manager.close()

    run(body())


def test_stop_without_leases_drains_the_service(starter: FakeStarter, manager: ServiceManager) -> None:

    async def body() -> None:
        lease = await manager.acquire(make_lock(), "run-1")
        await manager.release(lease.lease_id)
        assert await manager.stop(lease.service_id) is True
        assert starter.stop_forces == [False] and starter.live == set()

    run(body())


def test_failure_drops_the_service_at_once_and_releases_resources_only_after_the_stop(tmp_path: Path) -> None:
    starter = FakeStarter()
    events: list[LifecycleEventV1] = []
    manager = _manager(tmp_path, starter, events=events)
    lock = make_lock()

    async def body() -> None:
        lease = await manager.acquire(lock, "run-1")
        service = lease.service
        assert isinstance(service, FakeService)
        starter.stop_gate = asyncio.Event()
        service.fail()
        # dropped from the table at once: the lease is invalid, releasing it is a no-op
        assert not manager.is_valid(lease.lease_id)
        assert await manager.release(lease.lease_id) is False
        assert [s.state for s in manager.services()] == ["failed"]
        assert events[-1].event == "inference.failed"
        assert events[-1].details["code"] == "inference_process_exited"
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(manager.ledger.holders()) == 1  # stop not confirmed yet: resources still held
        next_acquire = asyncio.create_task(manager.acquire(lock, "run-2"))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not next_acquire.done() and starter.starts == 1
        starter.stop_gate.set()
        second = await next_acquire
        assert second.epoch == 2 and starter.starts == 2
        assert service.stopped and service.engine_stops == 1
        assert service.stop_calls == 0  # a failed service stops itself; the manager only waits for it
        assert list(manager.ledger.holders()) == [f"{second.service_id}#2"]
        service.fail()  # a late report from the old epoch changes nothing
        assert manager.is_valid(second.lease_id)
        await manager.close()

    run(body())


def test_failure_reported_while_starting_fails_the_waiters(starter: FakeStarter, manager: ServiceManager) -> None:

    async def body() -> None:
        starter.fail_while_starting = "inference_oom"
        with pytest.raises(HitchError) as info:
            await manager.acquire(make_lock(), "run-1")
        assert info.value.code == "inference_oom"
        await manager.close()
        assert starter.live == set() and starter.stop_calls == 0
        assert starter.double_stops == 0
        assert manager.ledger.holders() == {}

    run(body())


def test_failed_service_that_never_confirms_its_stop_keeps_resources_held(tmp_path: Path) -> None:
    starter = FakeStarter()
    events: list[LifecycleEventV1] = []
    manager = ServiceManager(
        HitchRoot(tmp_path / "root"), starter, ResourceLedger(BIG), events=events.append, failure_stop_timeout_s=0.01
    )
    lock = make_lock()

    async def body() -> None:
        lease = await manager.acquire(lock, "run-1")
        assert isinstance(lease.service, FakeService)
        starter.stop_gate = asyncio.Event()  # the engine never confirms its exit
        lease.service.fail()
        second = await manager.acquire(lock, "run-2")  # the fence ends; the old resources stay held
        assert second.epoch == 2
        assert sorted(manager.ledger.holders()) == [f"{lease.service_id}#1", f"{lease.service_id}#2"]
        unconfirmed = [e for e in events if e.event == "inference.failed" and e.epoch == 1][-1]
        assert unconfirmed.details["code"] == "inference_recovery_ambiguous"
        assert not any(e.event == "inference.stopped" for e in events)
        starter.stop_gate.set()
        await asyncio.gather(*starter.tasks)
        await manager.close()
        assert starter.live == set()

    run(body())


def test_start_that_cannot_confirm_its_cleanup_keeps_resources_held(starter: FakeStarter, manager: ServiceManager) -> None:

    async def body() -> None:
        starter.start_error = HitchError("inference_recovery_ambiguous", "engine may still run", {})
        with pytest.raises(HitchError):
            await manager.acquire(make_lock(), "run-1")
        assert len(manager.ledger.holders()) == 1
        starter.start_error = HitchError("inference_start_timeout", "never ready", {})
        with pytest.raises(HitchError):
            await manager.acquire(make_lock(), "run-1")
        assert len(manager.ledger.holders()) == 1  # the clean failure gave its resources back

    run(body())


def test_the_services_own_epoch_wins(tmp_path: Path) -> None:
    starter = FakeStarter()
    starter.epoch_offset = 5
    manager = _manager(tmp_path, starter)

    async def body() -> None:
        lease = await manager.acquire(make_lock(), "run-1")
        assert lease.epoch == 6
        await manager.stop(lease.service_id, force=True)
        starter.epoch_offset = 0
        again = await manager.acquire(make_lock(), "run-1")
        assert again.epoch == 7  # never reuses an epoch number
        await manager.close()

    run(body())


def test_unconfirmed_stop_keeps_resources_held(starter: FakeStarter, manager: ServiceManager) -> None:

    async def body() -> None:
        lease = await manager.acquire(make_lock(), "run-1")
        starter.stop_error = HitchError("inference_recovery_ambiguous", "could not confirm the exit", {})
        with pytest.raises(HitchError) as info:
            await manager.stop(lease.service_id, force=True)
        assert info.value.code == "inference_recovery_ambiguous"
        assert len(manager.ledger.holders()) == 1
        assert manager.services() == []

    run(body())


def test_cancelled_waiter_does_not_keep_the_service_alive(tmp_path: Path) -> None:
    starter = FakeStarter()
    manager = _manager(tmp_path, starter, idle_ttl_ms=0)

    async def body() -> None:
        starter.start_gate = asyncio.Event()
        task = asyncio.create_task(manager.acquire(make_lock(), "run-1"))
        await starter.started_event.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        starter.start_gate.set()
        await starter.wait_stops(1)  # ready with nobody waiting → idle TTL → stopped
        assert starter.live == set() and manager.services() == []

    run(body())


def test_events_are_appended_to_the_service_events_file_by_default(tmp_path: Path) -> None:
    starter = FakeStarter()
    root = HitchRoot(tmp_path / "root")
    manager = ServiceManager(root, starter, ResourceLedger(BIG), clock=lambda: 1234.5)

    async def body() -> str:
        lease = await manager.acquire(make_lock(), "run-1")
        await manager.release(lease.lease_id)
        await manager.stop(lease.service_id)
        return lease.service_id

    service_id = run(body())
    lines = (root.service_dir(service_id) / "events.jsonl").read_text().splitlines()
    events = [LifecycleEventV1.model_validate(json.loads(line)) for line in lines]
    assert _names(events) == [
        "inference.queued",
        "inference.acquired",
        "inference.released",
        "inference.draining",
        "inference.stopped",
    ]
    assert {(e.service_id, e.epoch, e.timestamp) for e in events} == {(service_id, 1, 1234.5)}
    assert events[1].owner_id == "run-1"


def test_events_name_the_run_that_caused_them_and_a_shared_service_names_each_run(tmp_path: Path) -> None:
    """Spec §12.1: the run whose acquire begins a start is the start's (the starter is told), each lease's
    acquired/released name its own run, a stop a run asked for names it; the idle TTL and a failure of the engine
    itself name none; an acquire for no run names none."""
    starter = FakeStarter()
    events: list[LifecycleEventV1] = []
    manager = _manager(tmp_path, starter, idle_ttl_ms=1, events=events)
    lock = make_lock()

    async def body() -> None:
        first = await manager.acquire(lock, "owner-a", run_id="run-a")
        second = await manager.acquire(lock, "owner-b", run_id="run-b")
        anonymous = await manager.acquire(lock, "owner-c")
        assert first.service_id == second.service_id and starter.starts == 1
        assert starter.requests[0].run_id == "run-a"
        assert (first.run_id, second.run_id, anonymous.run_id) == ("run-a", "run-b", None)
        for lease in (first, second, anonymous):
            await manager.release(lease.lease_id)
        await starter.wait_stops(1)  # the idle TTL: caused by no run
        again = await manager.acquire(lock, "owner-d", run_id="run-d")
        assert starter.requests[1].run_id == "run-d"
        await manager.release(again.lease_id)
        await manager.stop(again.service_id, run_id="run-e")  # e.g. a prepare for run-e stops what it started
        failing = await manager.acquire(lock, "owner-f", run_id="run-f")
        service = next(s for s in starter.live if s.request.service_id == failing.service_id)
        service.fail()
        await starter.wait_stops(3)
        for _ in range(5):
            await asyncio.sleep(0)

    run(body())
    named = [(e.event, e.owner_id, e.run_id) for e in events]
    assert named[:8] == [
        ("inference.queued", "owner-a", "run-a"),
        ("inference.acquired", "owner-a", "run-a"),
        ("inference.acquired", "owner-b", "run-b"),
        ("inference.acquired", "owner-c", None),
        ("inference.released", "owner-a", "run-a"),
        ("inference.released", "owner-b", "run-b"),
        ("inference.released", "owner-c", None),
        ("inference.draining", "hitch-manager", None),
    ]
    assert named[8:14] == [
        ("inference.stopped", "hitch-manager", None),
        ("inference.queued", "owner-d", "run-d"),
        ("inference.acquired", "owner-d", "run-d"),
        ("inference.released", "owner-d", "run-d"),
        ("inference.draining", "hitch-manager", "run-e"),
        ("inference.stopped", "hitch-manager", "run-e"),
    ]
    failed = [e for e in events if e.event == "inference.failed"]
    assert len(failed) == 1 and failed[0].run_id is None  # the engine failed by itself, under run-f's lease
