"""``hitch eval harbor resume EVAL`` (issue 30 item 2): only the trials without a terminal result run again, on
the same lock; real Harbor, real Docker trials, real daemon and gateway, the fake engine answering ``terminus-2``.

The evaluation's first trial is cancelled as soon as it starts (as Ctrl-C or a dead daemon leaves a trial: no
verifier ran); the other solves the task. A resume runs the cancelled slot alone, as a new run pinning the
evaluation's lock, keeps the other trial's outcome and run as they were, and a second resume finds nothing to do.
Refusals: an unknown evaluation, and one whose lock is no longer sealed in the root.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from harness.app.daemon_client import DaemonClient
from harness.app.requests import RunRequest, parse_request
from harness.contracts.evaluation import EvaluationPlanV1, EvaluationRecordV1
from harness.evals.harbor_agents import TERMINUS
from harness.evals.harbor_install import harbor_install
from harness.evals.harbor_run import EvalOptions, HarborEvaluation
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.engine.inputs import ServiceInputs
from tests.harness.evals.test_harbor_eval import CREATE_FILE, certified_agent, harbor, inputs, scripted_turns, trial_containers

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.slow]
__all__ = ["harbor", "inputs"]


def test_resume_runs_only_the_trials_without_a_terminal_result(inputs: ServiceInputs, tmp_path: Any) -> None:
    root = inputs.root
    certified_agent(root, TERMINUS)
    body: dict[str, Any] = {"model": "local/tiny", "device": "cpu", "profile": "baseline", "engine": "fake",
                            "launcher": "process", "runtime": "sglang-0.5.23-cpu-generic", "capture": "metadata",
                            "fake_flags": ["--fake-script", str(scripted_turns(tmp_path, turns=32))]}  # fmt: skip
    harbor_found = harbor_install(root)
    assert harbor_found is not None
    options = EvalOptions([CREATE_FILE], k=2, n_concurrent=2, evaluation_id="ev-resume", agent_timeout_s=240.0)
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    evaluation = HarborEvaluation(root, harbor_found, DaemonClient(root), parse_request(RunRequest, body), options)
    victim = evaluation.trials[0].name

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "started" and event.get("trial") == victim:
            assert evaluation.cancel(victim)

    first = evaluation.run(on_event)
    assert [t.status for t in first.trials] == ["cancelled", "completed"] and first.resumed == 0
    plan = EvaluationPlanV1.model_validate_json((evaluation.dir / "plan.json").read_bytes())
    assert plan.inference_id == first.inference_id is not None and [s.attempt for s in plan.slots] == [0, 1]

    out = as_json(hitch(root, "eval", "harbor", "resume", "ev-resume", "--json"))
    assert out["resumed"] == ["ev-resume-create-file-0-resume1"]
    record = EvaluationRecordV1.model_validate(out["record"])
    assert record.resumed == 1 and record.inference_id == first.inference_id
    again, kept = record.trials
    assert (again.trial, again.status, again.reward) == ("ev-resume-create-file-0-resume1", "completed", 1.0)
    assert kept == first.trials[1]  # the trial that had ended is kept as it was, run and all
    assert again.service is not None and again.service.inference_id == first.inference_id  # the same lock
    run = json.loads((root.runs / again.run_id / "run.json").read_text())
    assert run["status"] == "completed" and run["request"]["inference_id"] == first.inference_id
    assert json.loads((root.runs / first.trials[0].run_id / "run.json").read_text())["status"] == "cancelled"
    assert trial_containers("ev-resume") == []

    nothing = as_json(hitch(root, "eval", "harbor", "resume", "ev-resume", "--json"))
    assert nothing["nothing_to_resume"] is True and nothing["resumed"] == []

    # refusals
    unknown = hitch(root, "eval", "harbor", "resume", "nope", "--json")
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["code"] == "evaluation_not_found"
    (evaluation.dir / "outcomes" / "0.json").unlink()  # the slot is open again, but its lock is gone
    shutil.rmtree(root.digest_dir(root.sealed_locks, str(first.inference_id)))
    gone = hitch(root, "eval", "harbor", "resume", "ev-resume", "--json")
    assert gone.returncode == 2 and json.loads(gone.stdout)["error"]["code"] == "inference_lock_mismatch"
