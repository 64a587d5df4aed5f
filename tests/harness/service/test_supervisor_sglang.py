"""The supervisor with REAL SGLang (generic-CPU runtime): readiness passes against the real ``/server_info``.

Skipped when the runtime is not installed under $HITCH_ROOT, unless HITCH_REQUIRE_SGLANG=1 (then it fails).
All tests here share ``xdist_group("sglang")`` so one worker runs them (real SGLang needs ~2 GB and both cores).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import psutil
import pytest

from fixtures.process_faults import pid_alive
from harness.engine import EngineProgram
from harness.launch.process import ProcessEngine, live_group_members
from tests.components import installed_sglang
from tests.harness.engine.inputs import checkpoint_cache, service_inputs

pytestmark = [pytest.mark.integration, pytest.mark.needs_sglang, pytest.mark.slow, pytest.mark.xdist_group("sglang")]

REAL_STARTUP_TIMEOUT_S = 300.0


def _real_program() -> EngineProgram:
    return EngineProgram.from_runtime(installed_sglang())


def test_real_sglang_start_ready_stop(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    program = _real_program()
    inputs = service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))

    async def run() -> None:
        sup = inputs.supervisor(program, service_id="svc-real", startup_timeout_s=REAL_STARTUP_TIMEOUT_S)
        endpoint = await sup.start()
        assert sup.state == "ready"
        report = endpoint.readiness
        assert report.steps == ["health", "server_info", "responses", "responses_stream", "flush_cache"]
        assert report.engine_version == "0.5.23"
        assert report.max_total_num_tokens == inputs.lock.execution.max_total_tokens
        assert report.probe_output_tokens is not None and report.probe_output_tokens <= 8
        engine = sup.engine
        assert isinstance(engine, ProcessEngine)
        members = live_group_members(engine.pid)
        names = {psutil.Process(p).name() for p in members}
        assert len(members) >= 3, names  # main, sglang::scheduler, sglang::detokenizer
        async with httpx.AsyncClient(base_url=endpoint.base_url) as client:
            unauth = await client.get("/v1/models")
            models = await client.get("/v1/models", headers={"Authorization": f"Bearer {endpoint.keys.api_key}"})
        assert unauth.status_code == 401
        assert models.json()["data"][0]["id"] == endpoint.wire_model
        exit_info = await sup.stop()
        # The promise is a bounded stop: the engine is gone when stop() returns. A clean exit (0) within the
        # grace, or, when a loaded machine kept SGLang's shutdown past it, a SIGKILL that the stop records as
        # an escalation in its event (evidence, not a failure).
        assert exit_info is not None
        assert (exit_info.exit_code, exit_info.escalated) in ((0, False), (-9, True)), exit_info
        stopped = [e for e in sup.store.events() if e.event == "inference.stopped"]
        assert stopped[-1].details["escalated"] is exit_info.escalated
        assert stopped[-1].details["grace_s"] == sup.stop_timeout_s
        assert live_group_members(engine.pid) == []
        assert not any(pid_alive(p) for p in members)  # reparented children may linger as zombies briefly
        assert sup.state == "stopped"
        log = (inputs.root.service_dir("svc-real") / "engine.log").read_text()
        assert "server_args=" in log and "<redacted>" in log
        for key in endpoint.keys.values():
            assert key not in log

    asyncio.run(run())
