"""The manager + supervisor with REAL SGLang (generic-CPU runtime, process launcher): start → ready →
acquire/release → idle TTL → stop, the engine's whole process group gone.

The runtime is looked up under $HITCH_ROOT; the test root links to that install. Skipped when it is not
installed, unless HITCH_REQUIRE_SGLANG=1 (then it fails). ``xdist_group("sglang")``: one worker runs real
SGLang (~2 GB, both cores).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures.process_faults import pid_alive
from harness.launch.process import live_group_members
from harness.paths import HitchRoot
from harness.service.starter_supervisor import EngineChoice, SupervisedService
from harness.service.state_store import ServiceStateStore
from tests.components import installed_sglang
from tests.harness.engine.inputs import checkpoint_cache, service_inputs
from tests.harness.service.integration_support import LeakGuard, engine_pid, fake_manager, leak_guard_for

pytestmark = [pytest.mark.integration, pytest.mark.needs_sglang, pytest.mark.slow, pytest.mark.xdist_group("sglang")]


@pytest.fixture(autouse=True)
def leak_guard(tmp_path: Path) -> Iterator[LeakGuard]:
    yield from leak_guard_for(tmp_path)


def _runtime_root() -> HitchRoot:
    root = HitchRoot.at()
    installed_sglang(root)
    return root


def test_real_sglang_through_the_manager_start_acquire_release_ttl_stop(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    installed = _runtime_root()
    inputs = service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))
    inputs.root.runtime_envs.parent.mkdir(parents=True, exist_ok=True)
    inputs.root.runtime_envs.symlink_to(installed.runtime_envs)
    manager, starter = fake_manager(inputs.root, EngineChoice(engine="sglang"), idle_ttl_ms=500, startup_timeout_s=300.0)

    async def body() -> None:
        lease = await manager.acquire(inputs.lock, "run-1")
        service = lease.service
        assert isinstance(service, SupervisedService)
        assert service.readiness.engine_version == "0.5.23"
        assert service.readiness.max_total_num_tokens == inputs.lock.execution.max_total_tokens
        pid = engine_pid(starter, lease.service_id)
        members = live_group_members(pid)
        assert len(members) >= 3  # main, scheduler, detokenizer
        second = await manager.acquire(inputs.lock, "run-2")  # warm: the same engine
        assert second.epoch == lease.epoch and engine_pid(starter, second.service_id) == pid
        async with httpx.AsyncClient(base_url=service.base_url) as client:
            models = await client.get("/v1/models", headers={"Authorization": f"Bearer {service.endpoint.keys.api_key}"})
        assert models.json()["data"][0]["id"] == service.endpoint.wire_model
        assert await manager.release(lease.lease_id) and await manager.release(second.lease_id)
        for _ in range(1200):
            if not manager.services() and not live_group_members(pid):
                break
            await asyncio.sleep(0.1)
        assert manager.services() == []
        assert live_group_members(pid) == [] and not any(pid_alive(p) for p in members)
        record = ServiceStateStore(inputs.root, lease.service_id).read()
        assert record is not None and record.state == "stopped"

    run_long(body())


def run_long(coro: Coroutine[Any, Any, None]) -> None:
    """Like ``manager_fakes.run`` with a guard long enough for a real engine's cold start."""

    async def guarded() -> None:
        await asyncio.wait_for(coro, timeout=600)

    asyncio.run(guarded())
