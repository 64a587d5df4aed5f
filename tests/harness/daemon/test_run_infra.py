"""An engine failure under a run is an infrastructure failure (spec §9.2): its rows first, then its service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.contracts.events import LifecycleEventV1
from harness.daemon.run_infra import engine_failure
from harness.errors import ENGINE_FAILURE_CODES

INFERENCE_ID = "sha256:" + "a" * 64


def _rows(path: Path, *codes: str | None) -> Path:
    rows = [
        {"request_id": f"r{i}", "epoch": 1, "status": "failed" if c else "completed", "error_code": c}
        for i, c in enumerate(codes)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn": ')
    return path


def _event(name: str, epoch: int, service_id: str = "svc-1", **details: Any) -> LifecycleEventV1:
    return LifecycleEventV1.model_validate(
        {"event": name, "service_id": service_id, "inference_id": INFERENCE_ID, "epoch": epoch, "owner_id": "o",
         "timestamp": 1.0, "details": details}
    )  # fmt: skip


@pytest.mark.parametrize("code", sorted(ENGINE_FAILURE_CODES))
def test_a_request_that_met_a_dead_engine_makes_the_run_an_infrastructure_failure(tmp_path: Path, code: str) -> None:
    rows = _rows(tmp_path / "rows.jsonl", None, code, "inference_upstream_failed")
    found = engine_failure(rows, [], "svc-1", 1)
    assert found is not None and found.code == code
    assert found.details == {"source": "attempt_rows", "request_id": "r1", "epoch": 1}
    assert found.spec.category == "infrastructure"


def test_a_failure_of_the_runs_service_epoch_counts_even_without_a_failed_request(tmp_path: Path) -> None:
    rows = _rows(tmp_path / "rows.jsonl", None)
    events = [_event("inference.ready", 2), _event("inference.failed", 2, code="inference_oom", message="killed")]
    found = engine_failure(rows, events, "svc-1", 2)
    assert found is not None and found.code == "inference_oom"
    assert found.details == {"source": "service", "service_id": "svc-1", "epoch": 2}


def test_what_the_harness_handles_itself_is_not_an_engine_failure(tmp_path: Path) -> None:
    # a cut stream on a live engine, another epoch's or another service's failure, a stop nobody could confirm
    rows = _rows(tmp_path / "rows.jsonl", None, "inference_upstream_failed", "inference_context_exceeded")
    events = [
        _event("inference.failed", 1, code="inference_process_exited"),
        _event("inference.failed", 2, service_id="svc-2", code="inference_process_exited"),
        _event("inference.failed", 2, code="inference_recovery_ambiguous"),
        _event("inference.stopped", 2),
    ]
    assert engine_failure(rows, events, "svc-1", 2) is None
    assert engine_failure(tmp_path / "missing.jsonl", [], "svc-1", 2) is None
