"""The manager driving real supervised fake-engine processes (process launcher) through SupervisorStarter.

Every engine here is a real ``python -m fixtures.fake_sglang`` process; the leak guard asserts that none
is left after each test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fixtures.process_faults import pid_alive
from harness.errors import HitchError
from harness.service.manager import LeaseHandle
from harness.service.starter_supervisor import SupervisedService
from harness.service.state_store import ServiceStateStore
from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs
from tests.harness.service.integration_support import (
    LeakGuard,
    RecordingServer,
    engine_pid,
    fake_manager,
    leak_guard_for,
    lock_variant,
)
from tests.harness.service.manager_fakes import run

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def leak_guard(tmp_path: Path) -> Iterator[LeakGuard]:
    yield from leak_guard_for(tmp_path)


@pytest.fixture
def inputs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> ServiceInputs:
    return service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))


async def _wait_gone(pid: int, timeout_s: float = 30.0) -> None:
    end = asyncio.get_running_loop().time() + timeout_s
    while pid_alive(pid) and asyncio.get_running_loop().time() < end:
        await asyncio.sleep(0.05)


def _events(inputs: ServiceInputs, service_id: str) -> list[str]:
    return [e.event for e in ServiceStateStore(inputs.root, service_id).events()]


def test_start_ready_acquire_release_ttl_stop(inputs: ServiceInputs) -> None:
    manager, starter = fake_manager(inputs.root, idle_ttl_ms=300)

    async def body() -> None:
        lease = await manager.acquire(inputs.lock, "run-1")
        service = lease.service
        assert isinstance(service, SupervisedService)
        assert service.readiness.steps == ["health", "server_info", "responses", "responses_stream", "flush_cache"]
        pid = engine_pid(starter, lease.service_id)
        async with httpx.AsyncClient(base_url=service.base_url) as client:
            key = service.endpoint.keys.api_key
            models = await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert models.status_code == 200
        assert await manager.release(lease.lease_id) is True
        await _wait_gone(pid)
        assert not pid_alive(pid)
        for _ in range(2400):
            if not manager.services():
                break
            await asyncio.sleep(0.05)
        assert manager.services() == []
        record = ServiceStateStore(inputs.root, lease.service_id).read()
        assert record is not None and record.state == "stopped"

    run(body())
    names = _events(inputs, starter_service_id(inputs))
    for name in ("inference.queued", "inference.starting", "inference.ready", "inference.acquired", "inference.released"):
        assert name in names
    assert names[-1] == "inference.stopped"


def starter_service_id(inputs: ServiceInputs) -> str:
    from harness.service.isolation import service_key

    return service_key(inputs.lock, "run-1", None).service_id


def test_twenty_concurrent_acquires_start_one_engine(inputs: ServiceInputs) -> None:
    manager, starter = fake_manager(inputs.root)

    async def body() -> None:
        leases = await asyncio.gather(*(manager.acquire(inputs.lock, f"run-{i}") for i in range(20)))
        assert len({lease.service_id for lease in leases}) == 1
        assert len({lease.epoch for lease in leases}) == 1
        assert len({lease.service.base_url for lease in leases}) == 1
        pid = engine_pid(starter, leases[0].service_id)
        assert len(starter.supervisors) == 1
        for lease in leases:
            assert await manager.release(lease.lease_id)
        await manager.close(force=False)
        assert not pid_alive(pid)
        names = _events(inputs, leases[0].service_id)
        assert names.count("inference.starting") == 1
        assert names.count("inference.acquired") == 20

    run(body())


def test_different_locks_get_different_services(inputs: ServiceInputs) -> None:
    manager, starter = fake_manager(inputs.root)
    other = lock_variant(inputs.lock, request_timeout_ms=300_000)
    assert other.inference_id != inputs.lock.inference_id

    async def body() -> None:
        a, b = await asyncio.gather(manager.acquire(inputs.lock, "run-a"), manager.acquire(other, "run-b"))
        assert a.service_id != b.service_id and a.service.base_url != b.service.base_url
        pids = [engine_pid(starter, a.service_id), engine_pid(starter, b.service_id)]
        assert pids[0] != pids[1] and all(pid_alive(p) for p in pids)
        await manager.release(a.lease_id)
        await manager.release(b.lease_id)
        await manager.close(force=False)
        assert not any(pid_alive(p) for p in pids)

    run(body())


def test_double_release_releases_once(inputs: ServiceInputs) -> None:
    manager, _ = fake_manager(inputs.root)

    async def body() -> LeaseHandle:
        keep = await manager.acquire(inputs.lock, "keeper")
        lease = await manager.acquire(inputs.lock, "run-1")
        first, second = await asyncio.gather(manager.release(lease.lease_id), manager.release(lease.lease_id))
        assert sorted([first, second]) == [False, True]
        assert await manager.release(lease.lease_id) is False
        assert manager.is_valid(keep.lease_id)  # the other lease is untouched
        await manager.release(keep.lease_id)
        await manager.close(force=False)
        return lease

    lease = run(body())
    events = ServiceStateStore(inputs.root, lease.service_id).events()
    released = [e for e in events if e.event == "inference.released" and e.details.get("lease_id") == lease.lease_id]
    assert len(released) == 1


def test_ttl_racing_new_acquires_leaks_no_engine(inputs: ServiceInputs) -> None:
    manager, starter = fake_manager(inputs.root, idle_ttl_ms=1)
    seen: set[int] = set()

    async def body() -> None:
        for i in range(6):
            lease = await manager.acquire(inputs.lock, f"run-{i}")
            seen.add(engine_pid(starter, lease.service_id))
            await manager.release(lease.lease_id)
            # the TTL (1 ms) fires while the next acquire is already on its way
            await asyncio.sleep(0.001 * (i % 3))
            live = [p for p in seen if pid_alive(p)]
            assert len(live) <= 1, live
        await manager.close(force=False)

    run(body())
    assert seen and not any(pid_alive(p) for p in seen)


def test_port_held_by_unknown_server_gets_nothing_and_a_new_port_is_used(inputs: ServiceInputs) -> None:
    unknown = RecordingServer()
    picks: list[int] = []

    def picker(avoid: set[int]) -> int:
        from harness.service.ports import choose_port

        port = unknown.port if not picks else choose_port("127.0.0.1", avoid)
        picks.append(port)
        return port

    manager, _ = fake_manager(inputs.root, port_picker=picker)
    try:

        async def body() -> None:
            lease = await manager.acquire(inputs.lock, "run-1")
            service = lease.service
            assert isinstance(service, SupervisedService)
            assert service.ports_refused == [unknown.port]
            assert service.attempts == 2
            assert not service.base_url.endswith(f":{unknown.port}")
            await manager.release(lease.lease_id)
            await manager.close(force=False)

        run(body())
    finally:
        unknown.close()
    assert picks[0] == unknown.port and picks[1] != unknown.port
    assert unknown.requests == []  # not a health check, let alone a prompt or a key


def test_a_start_that_cannot_find_a_port_in_time_fails_and_leaves_nothing(inputs: ServiceInputs) -> None:
    unknown = RecordingServer()
    manager, _ = fake_manager(inputs.root, port_picker=lambda _avoid: unknown.port, startup_timeout_s=6.0)
    try:

        async def body() -> None:
            with pytest.raises(HitchError) as caught:
                await manager.acquire(inputs.lock, "run-1")
            assert caught.value.code in ("inference_port_conflict", "inference_process_exited", "inference_start_timeout")

        run(body())
    finally:
        unknown.close()
    assert not any(r.startswith("POST") for r in unknown.requests)


def test_a_fault_found_outside_fails_the_epoch_and_the_next_acquire_starts_a_new_one(inputs: ServiceInputs) -> None:
    """The gateway's abort check reports an engine that kept a slot: the supervisor fails that epoch like a crash
    (inference.failed with the code, engine stopped, lease revoked), and the next acquire gets a new epoch."""
    manager, starter = fake_manager(inputs.root)

    async def body() -> None:
        lease = await manager.acquire(inputs.lock, "run-1")
        pid = engine_pid(starter, lease.service_id)
        sup = starter.supervisors[lease.service_id]
        err = HitchError("inference_abort_unconfirmed", "the slot was kept", {"service_id": lease.service_id})
        assert await sup.fault(err, lease.epoch + 1) is False  # not the live epoch: nothing happens
        assert await sup.fault(err, lease.epoch) is True
        assert await sup.fault(err, lease.epoch) is False  # already failed
        await _wait_gone(pid)
        assert not pid_alive(pid) and not manager.is_valid(lease.lease_id)
        record = ServiceStateStore(inputs.root, lease.service_id).read()
        assert record is not None and (record.state, record.error_code) == ("failed", "inference_abort_unconfirmed")
        failed = [e for e in ServiceStateStore(inputs.root, lease.service_id).events() if e.event == "inference.failed"]
        assert {e.details.get("code") for e in failed} == {"inference_abort_unconfirmed"}
        again = await manager.acquire(inputs.lock, "run-1")
        assert again.epoch == lease.epoch + 1
        await manager.release(again.lease_id)
        await manager.close()

    run(body())
