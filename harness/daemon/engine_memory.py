"""The engine's resident memory while a run is live: :class:`EngineMemorySampler` (spec §12.1, service RSS).

One sampler per run, started when the run is bound and stopped when it ends: a point at once, one every
``interval_s``, one at the end. The series is bounded: when it holds ``max_points`` every other point is dropped
(the first and the newest kept) and the interval doubles, so a run of any length costs a fixed amount of memory
and of evidence. A point reads the engine's host process (PID + start time: a reused PID is never read) and its
descendants (SGLang's scheduler and detokenizer are children of the server process); an engine in a container
is not sampled here (``source: unavailable``). GPU memory is not sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import psutil

from harness.contracts.run_readiness import EngineMemorySampleV1, EngineMemorySeriesV1
from harness.contracts.service import ProcessIdentityV1
from harness.launch.process import is_our_process

__all__ = ["EngineMemorySampler", "tree_rss_bytes"]

INTERVAL_S = 5.0
MAX_POINTS = 240


def tree_rss_bytes(identity: ProcessIdentityV1) -> int | None:
    """The RSS of ``identity``'s process and its live descendants, summed; None when it is not ours any more."""
    if identity.pid is None or not is_our_process(identity):
        return None
    try:
        root = psutil.Process(identity.pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for proc in members:
        with contextlib.suppress(psutil.Error):  # a child that ended between the listing and the read
            total += int(proc.memory_info().rss)
    return total


class EngineMemorySampler:
    """Samples one engine's RSS on the daemon's loop until :meth:`stop` returns the series."""

    def __init__(
        self,
        identity: ProcessIdentityV1 | None,
        interval_s: float = INTERVAL_S,
        max_points: int = MAX_POINTS,
        read: Callable[[ProcessIdentityV1], int | None] = tree_rss_bytes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_points < 2:
            raise ValueError("max_points must be at least 2")
        self.identity = identity if identity is not None and identity.pid is not None else None
        self.interval_s = interval_s
        self.max_points = max_points
        self.thinned = 0
        self._read = read
        self._clock = clock
        self._t0: float | None = None
        self._points: list[EngineMemorySampleV1] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Take the first point now and sample every ``interval_s`` after (a container engine: nothing)."""
        if self.identity is None:
            return
        await self.sample()
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> EngineMemorySeriesV1:
        """End the sampling with a last point and return the series."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.identity is None:
            return EngineMemorySeriesV1(
                source="unavailable",
                unavailable_reason="the engine does not run as a host process of this daemon (a container)",
                interval_s=self.interval_s,
                max_points=self.max_points,
                thinned=0,
                points=[],
            )
        await self.sample()
        return EngineMemorySeriesV1(
            source="process_tree",
            interval_s=self.interval_s,
            max_points=self.max_points,
            thinned=self.thinned,
            points=list(self._points),
        )

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.sample()

    async def sample(self) -> None:
        """Take one point now (the loop, and the first and last points, call this)."""
        assert self.identity is not None
        rss = await asyncio.to_thread(self._read, self.identity)
        now = self._clock()
        if self._t0 is None:
            self._t0 = now
        point = EngineMemorySampleV1(t_s=round(max(0.0, now - self._t0), 3), at=time.time(), rss_bytes=rss)
        if len(self._points) >= self.max_points:
            self._thin()
        self._points.append(point)

    def _thin(self) -> None:
        """Drop every other point (the first kept; the newest is about to be added) and double the interval."""
        self._points = self._points[::2]
        self.interval_s *= 2
        self.thinned += 1
