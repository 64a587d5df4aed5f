"""The verifier is a role of its own (spec §11.1): each task's verifier role and locality are recorded, a verifier
whose credentials are missing fails the evaluation before anything starts, and ``offline`` is claimed only when
every verifier is local too. Hermetic (task folders written here), plus one refusal through ``hitch eval harbor
run`` that stops before any daemon, run or container (it needs only Harbor's install)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.contracts.evaluation import EvaluationRecordV1, TaskVerifierV1
from harness.errors import ERROR_TABLE, HitchError
from harness.evals.harbor_verifier import task_verifier, verifiers_of
from tests.harness.daemon.conftest import hitch
from tests.harness.engine.inputs import ServiceInputs
from tests.harness.evals.test_harbor_eval import CREATE_FILE, harbor, inputs

__all__ = ["harbor", "inputs"]  # the fixtures this module shares with test_harbor_eval

JUDGE = """
[verifier]
timeout_sec = 60.0
network_mode = "public"

[verifier.env]
OPENAI_API_KEY = "${HITCH_TEST_JUDGE_KEY}"
JUDGE_MODEL = "gpt-judge"
"""


def _task(base: Path, name: str, verifier: str = "") -> Path:
    task = base / name
    task.mkdir(parents=True)
    (task / "task.toml").write_text('schema_version = "1.4"\n' + verifier)
    return task


def test_a_test_script_verifier_is_local_and_a_credentialed_one_is_a_remote_judge(tmp_path: Path) -> None:
    tests_only = _task(tmp_path, "tests-only", '[verifier]\ntimeout_sec = 60.0\n[verifier.env]\nLEVEL = "${LEVEL:-1}"\n')
    judge = _task(tmp_path, "judge", JUDGE)
    found = verifiers_of([tests_only, judge], {"HITCH_TEST_JUDGE_KEY": "sk-secret"})
    assert [(v.task, v.role, v.locality) for v in found] == [
        ("tests-only", "tests", "local"),
        ("judge", "model-judge", "remote-or-unknown"),
    ]
    assert found[1].credential_env == ["OPENAI_API_KEY"] and found[1].network_mode == "public"
    assert "sk-secret" not in json.dumps([v.to_json_dict() for v in found])  # names, never values


def test_a_verifier_whose_credential_is_missing_fails_early_naming_it(tmp_path: Path) -> None:
    judge = _task(tmp_path, "judge", JUDGE)
    with pytest.raises(HitchError) as err:
        verifiers_of([judge], {})
    assert err.value.code == "eval_verifier_credentials_missing"
    assert err.value.details == {"missing": {"judge": ["HITCH_TEST_JUDGE_KEY"]}}
    assert ERROR_TABLE[err.value.code].exit_code == 2
    assert task_verifier(judge, {})[1] == ["HITCH_TEST_JUDGE_KEY"]


def _record(verifiers: list[TaskVerifierV1] | None, offline: bool) -> EvaluationRecordV1:
    return EvaluationRecordV1(
        evaluation_id="ev", tool_version="0.25.0", agent="terminus-2", model_connection="host", environment="docker",
        inference_id=None, engine="fake", started_at=0.0, finished_at=1.0, trials=[], verifiers=verifiers,
        offline=offline,
    )  # fmt: skip


def test_offline_is_claimed_only_when_every_verifier_is_local(tmp_path: Path) -> None:
    local = verifiers_of([_task(tmp_path, "a")], {})
    remote = verifiers_of([_task(tmp_path, "b", JUDGE)], {"HITCH_TEST_JUDGE_KEY": "x"})
    assert _record(local, True).offline
    for verifiers in (remote, local + remote, None):
        with pytest.raises(ValidationError):
            _record(verifiers, True)
    assert not _record(remote, False).offline and _record(None, False).candidate_locality == "local"
    with pytest.raises(ValidationError):  # a judge is never local
        TaskVerifierV1(task="t", role="model-judge", locality="local", credential_env=["K"], network_mode=None)


@pytest.mark.integration
@pytest.mark.needs_docker
def test_hitch_eval_refuses_a_judge_without_its_credential_before_anything_starts(inputs: ServiceInputs, tmp_path: Path) -> None:
    task = tmp_path / "judged-create-file"
    shutil.copytree(CREATE_FILE, task)
    (task / "task.toml").write_text(
        (CREATE_FILE / "task.toml").read_text() + '\n[verifier.env]\nOPENAI_API_KEY = "${HITCH_TEST_JUDGE_KEY}"\n'
    )
    proc = hitch(inputs.root, "eval", "harbor", "run", str(task), "--model", "local/tiny", "--engine", "fake", "--json")
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 2 and error["code"] == "eval_verifier_credentials_missing", proc.stdout + proc.stderr
    assert error["details"]["missing"] == {task.name: ["HITCH_TEST_JUDGE_KEY"]}
    assert not inputs.root.runs.exists() and not (inputs.root.path / "evals").exists()
