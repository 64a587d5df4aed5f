"""RunStore and RunRecordV1: the transitions, the terminal rule, the sweep at daemon start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.app.run_store import RunStore
from harness.contracts.run import RunRecordV1
from harness.errors import HitchError
from harness.paths import HitchRoot


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(HitchRoot(tmp_path / "root"))


def test_a_run_moves_forward_and_its_first_terminal_status_is_final(store: RunStore) -> None:
    store.admit("r1", "model-call", {"model": "local/tiny"}, "metadata")
    store.advance("r1", "preparing")
    store.advance("r1", "running", binding_id="b1")
    with pytest.raises(HitchError) as back:
        store.advance("r1", "preparing")
    assert back.value.code == "internal_error"
    done = store.finish("r1", "cancelled", HitchError("run_cancelled", "cancelled", {}))
    assert done.status == "cancelled" and done.error is not None and done.error.code == "run_cancelled"
    # the harness's own end afterwards does not change it
    again = store.finish("r1", "completed", None)
    assert again == done and store.read("r1") == done
    with pytest.raises(HitchError) as late:
        store.advance("r1", "running")
    assert late.value.code == "run_cancelled"
    assert [t.status for t in done.history] == ["admitted", "preparing", "running", "cancelled"]
    assert json.loads(store.path("r1").read_text())["binding_id"] == "b1"


def test_the_record_refuses_a_terminal_status_without_its_code(store: RunStore) -> None:
    record = store.admit("r2", None, {}, "off").to_json_dict()
    at = record["admitted_at"]
    failed = {**record, "status": "failed", "finished_at": at, "history": [{"status": "failed", "at": at}]}
    with pytest.raises(ValidationError, match="carries an error code"):
        RunRecordV1.model_validate(failed)
    with pytest.raises(ValidationError, match="not in the error table"):
        RunRecordV1.model_validate({**failed, "error": {"code": "no_such_code", "message": "x"}})
    completed = {**failed, "status": "completed", "history": [{"status": "completed", "at": at}]}
    with pytest.raises(ValidationError, match="completed run carries no error"):
        RunRecordV1.model_validate({**completed, "error": {"code": "internal_error", "message": "x"}})
    with pytest.raises(ValidationError, match="extra"):
        RunRecordV1.model_validate({**record, "surprise": 1})


def test_the_sweep_ends_every_live_run_interrupted_and_leaves_finished_ones(store: RunStore) -> None:
    store.admit("live-a", None, {}, "metadata")
    store.admit("live-b", None, {}, "metadata")
    store.advance("live-b", "running")
    store.admit("done", None, {}, "metadata")
    done = store.finish("done", "completed", None)
    swept = store.sweep_interrupted()
    assert sorted(r.run_id for r in swept) == ["live-a", "live-b"]
    for run_id in ("live-a", "live-b"):
        record = store.read(run_id)
        assert record is not None and record.status == "interrupted"
        assert record.error is not None and record.error.code == "run_interrupted"
    assert store.read("done") == done and store.live() == []
    with pytest.raises(HitchError) as missing:
        store.finish("nope", "failed", HitchError("internal_error", "x", {}))
    assert missing.value.code == "run_not_found"
