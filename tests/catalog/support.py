"""A predicate as the evaluator writes it (DESIGN §6, schema 4), and one signed under schema 2, for the catalog tests."""

from __future__ import annotations

from typing import Any

RUNTIME = "sha256:" + "1" * 64
MODEL = "sha256:" + "2" * 64
LOCK = "sha256:" + "3" * 64


def make_predicate(level: str = "contract") -> dict[str, Any]:
    from tests.reports.sample_data import overhead_metrics

    return {
        "schema_version": "4",
        "level": level,
        "reasons": ["fake engine: proves the harness only"],
        "to_certify": [],
        "suite_version": "1",
        "project_commit": "0" * 40,
        "device": "cpu",
        "engine": "fake",
        "launcher": "process",
        "runtime_id": RUNTIME,
        "runtime_name": "sglang-0.5.23-cpu-generic",
        "runtime_pinned_by": None,
        "model_id": MODEL,
        "model": None,
        "inference_id": LOCK,
        "profile": "baseline",
        "hardware": {"cpu": "test", "amx": False},
        "checks": [
            {
                "id": "protocol.chat.stream",
                "status": "passed",
                "required": True,
                "duration_s": 0.25,
                "summary": "4 chunks",
                "details": {},
            },
            {
                "id": "faults.engine.oom",
                "status": "skipped",
                "required": False,
                "duration_s": 0.0,
                "summary": None,
                "details": {},
            },
        ],
        "metrics": {**overhead_metrics(), "throughput_ratio_c32": 0.93},
        "evidence": {"protocol.chat.stream/requests.jsonl": "sha256:" + "4" * 64},
        "finished_at": "2026-11-30T00:40:00Z",
        "reproduces": None,
    }


def make_v2_predicate() -> dict[str, Any]:
    """A predicate as entries were signed before schema 3: the headline is the black-box difference."""
    v2 = make_predicate()
    v2["schema_version"] = "2"
    del v2["to_certify"]
    v2["checks"] = [{k: v for k, v in c.items() if k != "summary"} for c in v2["checks"]]
    v2["metrics"] = {"gateway_added_latency_ms": {"p50": 1.5, "p95": 3.25, "p99": 4.0}}
    return v2
