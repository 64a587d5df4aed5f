"""A predicate as the evaluator writes it (DESIGN §6), for the catalog tests."""

from __future__ import annotations

from typing import Any

RUNTIME = "sha256:" + "1" * 64
MODEL = "sha256:" + "2" * 64
LOCK = "sha256:" + "3" * 64


def make_predicate(level: str = "contract") -> dict[str, Any]:
    return {
        "schema_version": "2",
        "level": level,
        "reasons": ["fake engine: proves the harness only"],
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
            {"id": "protocol.chat.stream", "status": "passed", "required": True, "duration_s": 0.25, "details": {}},
            {"id": "faults.engine.oom", "status": "skipped", "required": False, "duration_s": 0.0, "details": {}},
        ],
        "metrics": {"gateway_added_latency_ms": {"p50": 1.5, "p95": 3.25, "p99": 4.0}},
        "evidence": {"protocol.chat.stream/requests.jsonl": "sha256:" + "4" * 64},
        "finished_at": "2026-11-30T00:40:00Z",
        "reproduces": None,
    }
