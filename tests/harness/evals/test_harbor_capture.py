"""``hitch eval harbor run --model-capture off|metadata|full [--require-model-capture]`` (spec §5, §10): each trial's
run captures what was asked (never a hard-coded mode), and under ``--require-model-capture`` a trial whose capture
is incomplete fails the evaluation closed — its record names ``inference_capture_incomplete``, no later trial
starts, and the command exits non-zero. Real Harbor, real Docker, terminus-2 on the fake engine.

The capture is made to fail the way a real one does: a ``full`` capture whose byte limit (``capture_max_bytes``,
1 byte) truncates the first request body, which the gateway marks ``partial``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.app.daemon_client import DaemonClient
from harness.app.requests import RunRequest, parse_request
from harness.contracts.evaluation import EvaluationRecordV1
from harness.errors import ERROR_TABLE, HitchError
from harness.evals.harbor_agents import TERMINUS
from harness.evals.harbor_install import harbor_install
from harness.evals.harbor_run import EvalOptions, HarborEvaluation
from harness.runtimes import default_runtime
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.engine.inputs import ServiceInputs
from tests.harness.evals.test_harbor_eval import CREATE_FILE, certified_agent, harbor, inputs, scripted_turns

__all__ = ["harbor", "inputs"]  # the fixtures this module shares with test_harbor_eval

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.slow]


def _body(script: Path, capture: str, **more: object) -> RunRequest:
    return parse_request(RunRequest, {
        "model": "local/tiny", "device": "cpu", "profile": "baseline", "engine": "fake", "launcher": "process",
        "runtime": default_runtime("cpu").runtime_id, "capture": capture, "fake_flags": ["--fake-script", str(script)],
        **more,
    })  # fmt: skip


def test_require_model_capture_with_capture_off_is_refused_before_anything(inputs: ServiceInputs) -> None:
    proc = hitch(inputs.root, "eval", "harbor", "run", str(CREATE_FILE), "--model", "local/tiny", "--engine", "fake",
                 "--model-capture", "off", "--require-model-capture", "--json")  # fmt: skip
    assert json.loads(proc.stdout)["error"]["code"] == "usage_error", proc.stdout + proc.stderr
    assert not (inputs.root.path / "evals").exists() and not inputs.root.runs.exists()


def test_model_capture_full_is_what_each_trials_run_captures(inputs: ServiceInputs, tmp_path: Path) -> None:
    certified_agent(inputs.root, TERMINUS)
    argv = ["eval", "harbor", "run", str(CREATE_FILE), "-k", "1", "-n", "1", "--model", "local/tiny", "--device", "cpu",
            "--engine", "fake", "--fake-script", str(scripted_turns(tmp_path)), "--eval-id", "ev-full",
            "--model-capture", "full", "--require-model-capture", "--json"]  # fmt: skip
    record = EvaluationRecordV1.model_validate(as_json(hitch(inputs.root, *argv))["record"])
    assert record.model_capture == "full" and record.require_model_capture and record.error is None
    # create-file's verifier is its test script, handed no credential: local, so the evaluation may claim offline
    assert [(v.role, v.locality) for v in record.verifiers or []] == [("tests", "local")] and record.offline
    (trial,) = record.trials
    assert trial.status == "completed" and trial.usage is not None and trial.usage.evidence_complete
    run = json.loads((inputs.root.runs / trial.run_id / "run.json").read_text())
    assert run["capture"] == "full"
    segments = list((inputs.root.run_inference_dir(trial.run_id) / "capture").rglob("*"))
    assert any(p.is_file() and p.stat().st_size > 0 for p in segments), "full capture kept the bodies"


def test_an_incomplete_capture_fails_the_evaluation_closed(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    certified_agent(root, TERMINUS)
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    found = harbor_install(root)
    assert found is not None
    body = _body(scripted_turns(tmp_path), "full", capture_max_bytes=1)
    options = EvalOptions([CREATE_FILE], k=2, n_concurrent=1, evaluation_id="ev-closed", require_model_capture=True)
    evaluation = HarborEvaluation(root, found, DaemonClient(root), body, options)
    with pytest.raises(HitchError) as err:
        evaluation.run()
    assert err.value.code == "inference_capture_incomplete" and ERROR_TABLE[err.value.code].exit_code != 0
    record = EvaluationRecordV1.model_validate_json((evaluation.dir / "evaluation.json").read_bytes())
    assert record.error is not None and record.error.code == "inference_capture_incomplete"
    assert record.model_capture == "full" and record.require_model_capture
    (first,) = record.trials  # the second trial never started
    assert first.usage is not None and not first.usage.evidence_complete
    execution = json.loads((root.run_inference_dir(first.run_id) / "execution.json").read_text())
    assert execution["incomplete_code"] == "inference_capture_incomplete"
    runs = sorted(p.name for p in root.runs.iterdir())
    assert runs == [first.run_id], "no run was created for a trial after the failed one"
