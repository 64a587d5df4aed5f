"""EvaluationStore: an evaluation's record, plan and slot outcomes written whole under evals/<id>/, read back, refused
when absent or foreign; a resume keeps only the slots whose trial ended by itself."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from harness.app.evaluation_store import EvaluationStore
from harness.contracts.evaluation import EvaluationPlanV1, EvaluationRecordV1, TrialOutcomeV1, TrialSlotV1
from harness.errors import HitchError
from harness.paths import HitchRoot


def _record(evaluation_id: str) -> EvaluationRecordV1:
    return EvaluationRecordV1(
        evaluation_id=evaluation_id, tool_version="0.25.0", agent="terminus-2", model_connection="host",
        environment="docker", inference_id=None, engine="fake", started_at=0.0, finished_at=1.0, trials=[],
    )  # fmt: skip


def test_a_record_is_written_in_its_own_private_folder_and_read_back(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    store = EvaluationStore(root)
    path = store.write(_record("ev-a"))
    assert path == root.path / "evals" / "ev-a" / "evaluation.json" == store.path("ev-a")
    assert stat.S_IMODE(store.dir("ev-a").stat().st_mode) == 0o700
    assert store.read("ev-a") == _record("ev-a")
    store.write(_record("ev-a").model_copy(update={"finished_at": 2.0}))  # replaced whole
    assert store.read("ev-a").finished_at == 2.0


def test_an_absent_or_foreign_record_is_evaluation_not_found(tmp_path: Path) -> None:
    store = EvaluationStore(HitchRoot(tmp_path / "root"))
    with pytest.raises(HitchError) as absent:
        store.read("nope")
    assert absent.value.code == "evaluation_not_found" and absent.value.details == {"evaluation_id": "nope"}
    store.dir("bad").mkdir(parents=True)
    for text in (b"{not json", b'{"evaluation_id": "bad"}', b"\xff\xfe"):
        store.path("bad").write_bytes(text)
        with pytest.raises(HitchError) as foreign:
            store.read("bad")
        assert foreign.value.code == "evaluation_not_found"
        assert foreign.value.details == {"path": str(store.path("bad"))}


def _outcome(slot: int, status: str) -> TrialOutcomeV1:
    return TrialOutcomeV1.model_validate(
        {"trial": f"ev-t-{slot}", "task": "t", "run_id": f"ev-t-{slot}", "binding_id": None, "status": status,
         "reward": None, "usage": None, "service": None, "timing": None}
    )  # fmt: skip


def test_the_plan_and_the_outcomes_a_resume_keeps(tmp_path: Path) -> None:
    store = EvaluationStore(HitchRoot(tmp_path / "root"))
    with pytest.raises(HitchError) as none:
        store.read_plan("ev")
    assert none.value.code == "evaluation_not_found" and none.value.details == {"evaluation_id": "ev"}
    plan = EvaluationPlanV1(
        evaluation_id="ev", agent="terminus-2", environment="docker", k=1, n_concurrent=1, agent_kwargs={}, agent_paths=[],
        agent_timeout_s=None, infra_retries=1, agent_profile_id=None, eval_image=None, run_body={"engine": "fake"},
        inference_id=None, slots=[TrialSlotV1(slot=n, task="/tasks/t", attempt=n) for n in range(5)], created_at=1.0,
    )  # fmt: skip
    store.write_plan(plan)
    assert store.read_plan("ev") == plan and store.plan_path("ev") == store.dir("ev") / "plan.json"
    for slot, status in enumerate(("completed", "failed", "cancelled", "interrupted")):
        store.write_outcome("ev", slot, _outcome(slot, status))
    store.dir("ev").joinpath("outcomes", "4.json").write_text("{half")  # unreadable: run again, never trusted
    assert store.kept_outcomes("ev", 5) == {0: _outcome(0, "completed"), 1: _outcome(1, "failed")}
    store.plan_path("ev").write_text("{}")
    with pytest.raises(HitchError) as foreign:
        store.read_plan("ev")
    assert foreign.value.code == "evaluation_not_found" and foreign.value.details == {"path": str(store.plan_path("ev"))}
