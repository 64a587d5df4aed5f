"""Fair admission: round-robin across runs, queue timeout, permits released exactly once."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission import FairQueue
from harness.errors import HitchError


def test_round_robin_across_runs_and_release_once() -> None:
    async def main() -> list[str]:
        q = FairQueue(1, 100)
        first = await q.acquire("a", 5)
        served: list[str] = []

        async def worker(run: str, tag: str) -> None:
            permit = await q.acquire(run, 5)
            served.append(tag)
            await asyncio.sleep(0)
            assert permit.release() is True
            assert permit.release() is False

        tasks = [asyncio.create_task(worker("a", f"a{i}")) for i in range(10)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(worker("b", "b")))
        await asyncio.sleep(0)
        first.release()
        await asyncio.gather(*tasks)
        assert (q.acquired, q.released, q.in_use, q.repeat_releases) == (12, 12, 0, 11)
        return served

    served = asyncio.run(main())
    assert served.index("b") <= 1


def test_queue_timeout_and_cancelled_waiter_leave_no_trace() -> None:
    async def main() -> None:
        q = FairQueue(1, 100)
        held = await q.acquire("a", 1)
        with pytest.raises(HitchError) as info:
            await q.acquire("a", 0.01)
        assert info.value.code == "inference_queue_timeout"
        waiter = asyncio.create_task(q.acquire("b", 5))
        await asyncio.sleep(0)
        assert q.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert q.waiting == 0
        held.release()
        assert q.in_use == 0
        full = FairQueue(1, 0)
        await full.acquire("a", 1)
        with pytest.raises(HitchError):
            await full.acquire("a", 1)

    asyncio.run(main())


def test_admissions_are_numbered_in_the_order_served() -> None:
    async def main() -> list[tuple[str, int]]:
        q = FairQueue(1, 10)
        first = await q.acquire("a", 5)
        served: list[tuple[str, int]] = [("a", first.seq)]

        async def worker(run: str) -> None:
            permit = await q.acquire(run, 5)
            served.append((run, permit.seq))
            permit.release()

        tasks = []
        for run in ("b", "c", "d"):  # one request per run: arrival order, whatever the run
            tasks.append(asyncio.create_task(worker(run)))
            await asyncio.sleep(0)
        first.release()
        await asyncio.gather(*tasks)
        return served

    assert asyncio.run(main()) == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]


def test_a_faulted_queue_refuses_waiters_and_newcomers_and_never_hands_a_permit_on() -> None:
    async def main() -> None:
        q = FairQueue(2, 10)
        kept = await q.acquire("a", 5)
        other = await q.acquire("b", 5)
        waiter = asyncio.create_task(q.acquire("c", 5))
        await asyncio.sleep(0)
        assert q.waiting == 1
        q.fault(HitchError("inference_abort_unconfirmed", "slot kept", {"service_id": "s"}))
        kept.keep()
        with pytest.raises(HitchError) as info:
            await waiter
        assert info.value.code == "inference_abort_unconfirmed" and q.waiting == 0
        with pytest.raises(HitchError) as again:
            await q.acquire("d", 5)
        assert again.value.code == "inference_abort_unconfirmed"
        assert not await q.drained(0.01)  # the other request is still in flight
        drained = asyncio.create_task(q.drained(5))
        await asyncio.sleep(0)
        other.release()
        assert await drained  # only the kept permit is out
        assert (q.in_use, q.kept, q.acquired, q.released) == (1, 1, 2, 1)
        kept.release()  # a kept permit is never released later
        assert (q.in_use, q.repeat_releases) == (1, 1)

    asyncio.run(main())
