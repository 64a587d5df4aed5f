"""SGLang's load figures as the readiness wait, the abort check and the certification read them."""

from __future__ import annotations

from harness.engine.load import EngineLoad, load_from_loads, load_from_metrics


def test_v1_loads_sums_its_ranks_and_states_when_the_oldest_was_taken() -> None:
    body = {
        "timestamp": "2026-12-06T19:00:00+00:00",  # the answer's own time (ISO), not the snapshot's
        "loads": [
            {"timestamp": 1_765_000_010.5, "dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 2},
            {"timestamp": 1_765_000_009.0, "dp_rank": 1, "num_running_reqs": 3, "num_waiting_reqs": 0},
        ],
    }
    assert load_from_loads(body) == EngineLoad(running=4, waiting=2, taken_at=1_765_000_009.0)


def test_a_rank_without_a_snapshot_time_leaves_the_time_unstated() -> None:
    body = {"loads": [{"timestamp": 1.0, "num_running_reqs": 1}, {"num_running_reqs": 0, "timestamp": True}]}
    assert load_from_loads(body) == EngineLoad(running=1, waiting=0, taken_at=None)
    assert load_from_loads({"loads": []}) == EngineLoad(running=0, waiting=0, taken_at=None)
    assert load_from_loads({"nope": 1}) is None


def test_metrics_state_no_time() -> None:
    text = 'sglang:num_running_reqs{model_name="m"} 2.0\nsglang:num_queue_reqs{model_name="m"} 1.0\n'
    assert load_from_metrics(text) == EngineLoad(running=2, waiting=1, taken_at=None)
