"""The abort check trusts only a load snapshot taken after the request was let go (gateway.slot_probe).

SGLang's ``/v1/loads`` is a snapshot its scheduler publishes after a prefill, on idle loops and every few
decode steps; read just after a stream's first events it can still show the engine empty while the engine runs
the request (SGLang 0.5.23 with SmolLM2: an engine that kept the slot read as free). A real HTTP engine on
loopback answers a scripted sequence of snapshots, each stamped relative to the moment the check starts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from gateway.engine_http import EnginePool
from gateway.slot_probe import SlotVerdict, confirm_slot_free

OLD_S = -30.0  # a snapshot taken half a minute before the request was let go


def _check(snapshots: list[tuple[float | None, int]], bound_s: float = 2.0) -> tuple[SlotVerdict, int]:
    """Serve ``snapshots`` ((age relative to the check's start or None for no timestamp, running), the last one
    repeated) and run the check with no other request at the engine; returns the verdict and the reads made."""
    reads = 0

    async def main() -> SlotVerdict:
        started = time.time()

        async def loads(_: web.Request) -> web.Response:
            nonlocal reads
            offset, running = snapshots[min(reads, len(snapshots) - 1)]
            reads += 1
            rank: dict[str, Any] = {"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": 0}
            if offset is not None:
                rank["timestamp"] = started + offset if offset < 0 else time.time()
            return web.json_response({"timestamp": "2026-12-06T00:00:00+00:00", "loads": [rank]})

        app = web.Application()
        app.router.add_get("/v1/loads", loads)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        pool = EnginePool()
        try:
            return await confirm_slot_free(pool, f"http://127.0.0.1:{port}", "ek", lambda: 0, bound_s)
        finally:
            pool.close()
            await runner.cleanup()

    verdict = asyncio.run(main())
    return verdict, reads


def test_an_old_snapshot_showing_the_engine_empty_is_not_a_free_slot() -> None:
    # stale "empty" twice, then a fresh snapshot that shows the request still running: the slot is kept
    verdict, reads = _check([(OLD_S, 0), (OLD_S, 0), (0.0, 1)], bound_s=1.0)
    assert (verdict.outcome, verdict.engine_load, verdict.stale_reads) == ("unconfirmed", 1, 2)
    assert reads > 3


def test_a_fresh_snapshot_showing_the_slot_free_confirms_it_after_the_stale_ones() -> None:
    verdict, reads = _check([(OLD_S, 0), (0.0, 1), (0.0, 0)])
    assert (verdict.outcome, verdict.engine_load, verdict.stale_reads, reads) == ("free", 0, 1, 3)


def test_a_snapshot_without_a_time_is_taken_as_it_is() -> None:
    # an engine that does not stamp its figures (as /metrics): nothing to compare, the figure is read as it is
    verdict, reads = _check([(None, 0)])
    assert (verdict.outcome, verdict.stale_reads, reads) == ("free", 0, 1)
