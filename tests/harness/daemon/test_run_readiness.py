"""A run's execution evidence holds its service epoch's readiness and the engine's memory (spec §12.1).

- Through the daemon (real gateway, fake engine processes): the run that started the engine has its readiness
  steps, a cold-start and a warm-up time and, needing tool calls, the tool-call probe it ran; a run that then
  shares that service has the same epoch's readiness with no cold start or warm-up of its own and the probe an
  earlier run made; a run that needs no tool calls has none. Each has an RSS series of the engine, in time order.
- The sampler on its own: bounded (every other point dropped past ``max_points``, the interval doubled), and an
  engine it cannot read as a host process (a container) is ``unavailable``, never a series of zeros.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from harness.app.daemon_client import DaemonClient, start_daemon
from harness.app.requests import FinishRunRequest, RunRequest, parse_request
from harness.contracts.evidence import InferenceExecutionEvidenceV1
from harness.contracts.run_readiness import EngineMemorySeriesV1
from harness.contracts.service import ProcessIdentityV1
from harness.daemon.engine_memory import EngineMemorySampler
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from tests.harness.daemon.conftest import FAST
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs

_READINESS_STEPS = ["health", "server_info", "responses", "responses_stream", "flush_cache"]


def _ask(run_id: str, harness: str) -> RunRequest:
    body: dict[str, Any] = {"run_id": run_id, "harness": harness, "model": "local/tiny", "device": "cpu",
                            "runtime": get_runtime(GENERIC_RUNTIME).runtime_id, "engine": "fake"}  # fmt: skip
    if harness == "codex":
        body["certifying"] = True  # a run that certifies Codex needs no profile for it yet; it needs tool calls
    return parse_request(RunRequest, body)


def _execution(root: HitchRoot, run_id: str) -> InferenceExecutionEvidenceV1:
    return InferenceExecutionEvidenceV1.model_validate_json((root.runs / run_id / "inference" / "execution.json").read_bytes())


def _assert_series(series: EngineMemorySeriesV1 | None) -> None:
    assert series is not None and series.source == "process_tree" and series.unavailable_reason is None
    points = series.points
    assert len(points) >= 2  # one when the run was bound, one when it ended
    assert [p.t_s for p in points] == sorted(p.t_s for p in points)
    assert all(p.rss_bytes is not None and p.rss_bytes > 0 for p in points)  # the engine lived all along
    assert all(p.vram_bytes is None for p in points)  # GPU memory is not sampled


@pytest.mark.integration
def test_a_runs_evidence_holds_its_readiness_cold_start_tool_probe_and_rss_series(inputs: ServiceInputs) -> None:
    root = inputs.root
    start_daemon(root, FAST)
    client = DaemonClient(root)
    cold = client.create_run(_ask("cold", "codex"))
    warm = client.create_run(_ask("warm", "codex"))  # the same lock and service, now ready
    plain = client.create_run(_ask("plain", "model-call"))
    assert {(r["service_id"], r["epoch"]) for r in (cold, warm, plain)} == {(cold["service_id"], cold["epoch"])}
    for run_id in ("cold", "warm", "plain"):
        client.finish_run(run_id, FinishRunRequest(status="completed"))

    first = _execution(root, "cold")
    ready = first.readiness
    assert ready is not None and (ready.service_id, ready.epoch) == (cold["service_id"], cold["epoch"])
    assert ready.started_by_run and not first.reused_service and first.cache_condition == "cold"
    assert ready.steps == _READINESS_STEPS
    assert ready.cold_start_ms is not None and ready.warmup_ms is not None
    assert ready.tool_call_required and ready.tool_call is not None and ready.tool_call.by_this_run
    _assert_series(first.engine_memory)

    shared = _execution(root, "warm")
    again = shared.readiness
    assert again is not None and not again.started_by_run and shared.reused_service and shared.cache_condition == "warm"
    assert again.steps == _READINESS_STEPS and again.cold_start_ms is None and again.warmup_ms is None
    assert again.tool_call is not None and not again.tool_call.by_this_run  # probed once per epoch, by "cold"
    assert again.tool_call.seconds == ready.tool_call.seconds
    _assert_series(shared.engine_memory)

    text = _execution(root, "plain").readiness
    assert text is not None and not text.tool_call_required and text.tool_call is None


def test_the_sampler_keeps_a_bounded_series_in_time_order() -> None:
    readings = itertools.count(1000, 10)
    ticks = itertools.count(0.0, 1.5)
    identity = ProcessIdentityV1(launcher="process", pid=1, start_time=0.0)
    sampler = EngineMemorySampler(
        identity, interval_s=3600.0, max_points=4, read=lambda _: next(readings), clock=lambda: next(ticks)
    )

    async def body() -> EngineMemorySeriesV1:
        await sampler.start()
        for _ in range(6):
            await sampler.sample()
        return await sampler.stop()

    series = asyncio.run(body())
    assert len(series.points) <= 4 and series.thinned >= 1
    assert series.interval_s == 3600.0 * 2**series.thinned
    assert series.points[0].t_s == 0.0 and series.points[0].rss_bytes == 1000  # the first point is kept
    assert series.points[-1].rss_bytes == 1070  # and the last: eight readings in all
    assert [p.t_s for p in series.points] == sorted(p.t_s for p in series.points)


def test_an_engine_in_a_container_is_unavailable_not_zero() -> None:
    container = ProcessIdentityV1(launcher="oci", container_id="c" * 64)
    sampler = EngineMemorySampler(container, read=lambda _: pytest.fail("a container is not read as a host process"))

    async def body() -> EngineMemorySeriesV1:
        await sampler.start()
        return await sampler.stop()

    series = asyncio.run(body())
    assert series.source == "unavailable" and series.unavailable_reason and series.points == []
