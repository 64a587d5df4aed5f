"""Fakes for the manager tests: a starter that records starts/stops and counts live services.

No process is started: a :class:`FakeService` is "live" from the moment the starter returns it until
its ``stop`` completes. Starts and stops can be held open with gates (events), or made to fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.lock import ProfileShort, build_lock
from harness.service.ledger import Capacity
from harness.service.manager import StartRequest
from tests.harness.lock_inputs import model_manifest, runtime_manifest

T = TypeVar("T")

BIG = Capacity(cpu_cores=1024, memory_bytes=1 << 50, gpu_count=8, disk_bytes=1 << 50)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one async test body; a generous guard turns a hang into a failure instead of a stuck run."""

    async def guarded() -> T:
        return await asyncio.wait_for(coro, timeout=60)

    return asyncio.run(guarded())


def make_lock(
    profile: ProfileShort = "baseline",
    context: int = 4096,
    device: str = "cpu",
    **execution: Any,
) -> InferenceLockV1:
    lock = build_lock(
        model_manifest(),
        runtime_manifest(backend=device),
        device="cuda" if device == "cuda" else "cpu",
        profile=profile,
        cpu_cores_per_node=4,
        context_tokens=context,
    )
    if execution:
        lock = lock.model_copy(update={"execution": lock.execution.model_copy(update=execution)})
    return lock


class FakeService:
    """Behaves like one supervisor epoch: ``stop`` confirms the engine is gone and calls
    ``on_released``; after a reported failure it stops its engine by itself, then calls ``on_released``."""

    def __init__(self, starter: FakeStarter, request: StartRequest) -> None:
        self.starter = starter
        self.request = request
        self.stop_calls = 0  # by the manager
        self.engine_stops = 0  # the engine really ended (must end up exactly 1)
        self.stopped = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:1/{self.request.service_id}/{self.request.epoch}"

    @property
    def epoch(self) -> int:
        return self.request.epoch + self.starter.epoch_offset

    def fail(self, code: str = "inference_process_exited") -> None:
        """What the supervisor's monitor does when the engine dies: report, then stop and release."""
        self.request.on_failure(HitchError(code, "the engine exited", {"exit_code": 137}))
        self.starter.tasks.add(asyncio.ensure_future(self._self_stop()))

    async def _self_stop(self) -> None:
        await self._stop_engine()
        self.request.on_released()

    async def stop(self, force: bool = False) -> None:
        self.stop_calls += 1
        self.starter.stop_calls += 1
        self.starter.stop_forces.append(force)
        await self._stop_engine()
        self.request.on_released()

    async def _stop_engine(self) -> None:
        self.engine_stops += 1
        if self.engine_stops > 1:
            self.starter.double_stops += 1
        if self.starter.stop_gate is not None:
            await self.starter.stop_gate.wait()
        # a few loop turns, so stops overlap with whatever else is going on
        for _ in range(3):
            await asyncio.sleep(0)
        if self.starter.stop_error is not None:
            raise self.starter.stop_error
        self.stopped = True
        self.starter.live.discard(self)
        self.starter.stopped_services.append(self)
        self.starter.stopped_event.set()


class FakeStarter:
    """An injectable starter: ``await starter(request)`` → a ready :class:`FakeService`."""

    def __init__(self) -> None:
        self.requests: list[StartRequest] = []
        self.live: set[FakeService] = set()
        self.stopped_services: list[FakeService] = []
        self.stop_calls = 0
        self.stop_forces: list[bool] = []
        self.double_stops = 0
        self.max_live = 0
        self.start_gate: asyncio.Event | None = None
        self.stop_gate: asyncio.Event | None = None
        self.start_error: HitchError | None = None
        self.stop_error: HitchError | None = None
        self.fail_while_starting: str | None = None  # report this failure code before returning
        self.epoch_offset = 0  # the service's own epoch may differ from the manager's proposal
        self.tasks: set[asyncio.Future[None]] = set()
        self.started_event = asyncio.Event()
        self.stopped_event = asyncio.Event()

    @property
    def starts(self) -> int:
        return len(self.requests)

    async def __call__(self, request: StartRequest) -> FakeService:
        self.requests.append(request)
        self.started_event.set()
        if self.start_gate is not None:
            await self.start_gate.wait()
        await asyncio.sleep(0)
        if self.start_error is not None:
            raise self.start_error
        service = FakeService(self, request)
        self.live.add(service)
        self.max_live = max(self.max_live, len(self.live))
        if self.fail_while_starting is not None:
            service.fail(self.fail_while_starting)
        return service

    async def wait_stops(self, count: int) -> None:
        while len(self.stopped_services) < count:
            self.stopped_event.clear()
            await self.stopped_event.wait()
