"""``hitch eval harbor regrade EVAL`` (issue 30 item 2): a verifier-only rerun; starts no service, calls no model.

One real evaluation (Harbor, Docker, the fake engine answering ``terminus-2``) of the regradable ``create-file``
(``fixtures/harbor_regrade_tasks``: its output file is an artifact, its verifier runs in a container of its own)
solves the task. With the daemon stopped, the regrade re-scores the kept trial: the same reward, the source run
named, no usage, no daemon started and no run created. The kept output changed by hand re-scores as 0. A trial
whose task verifies in the agent's own container (``fixtures/harbor_tasks``, shared mode) is refused by Harbor:
``evaluation_not_regradable``; an unknown evaluation is ``evaluation_not_found``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.app.daemon_client import daemon_running
from harness.contracts.evaluation import EvaluationRecordV1
from harness.evals.harbor_agents import TERMINUS
from tests.harness.daemon.conftest import as_json, hitch, stop_quietly
from tests.harness.engine.inputs import ServiceInputs
from tests.harness.evals.test_harbor_eval import (
    CREATE_FILE,
    REPO,
    certified_agent,
    harbor,
    inputs,
    scripted_turns,
    trial_containers,
)

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.slow]
__all__ = ["harbor", "inputs"]

REGRADABLE = REPO / "fixtures" / "harbor_regrade_tasks" / "create-file"


def _error(proc: Any) -> dict[str, Any]:
    assert proc.returncode != 0, proc.stdout
    error: dict[str, Any] = json.loads(proc.stdout)["error"]
    return error


def test_regrade_rescores_kept_trial_outputs_without_a_service(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    certified_agent(root, TERMINUS)
    argv = ["eval", "harbor", "run", str(REGRADABLE), "-k", "1", "-n", "1", "--model", "local/tiny", "--device", "cpu",
            "--engine", "fake", "--fake-script", str(scripted_turns(tmp_path)), "--eval-id", "ev-src", "--json"]  # fmt: skip
    source = EvaluationRecordV1.model_validate(as_json(hitch(root, *argv))["record"])
    (solved,) = source.trials
    assert (solved.status, solved.reward) == ("completed", 1.0)
    stop_quietly(root)
    runs_before = sorted(p.name for p in root.runs.iterdir())

    out = as_json(hitch(root, "eval", "harbor", "regrade", "ev-src", "--json"))
    record = EvaluationRecordV1.model_validate(out["record"])
    assert record.evaluation_id == "ev-src-regrade1" and record.regrade_of == "ev-src" and record.model_connection == "none"
    assert record.inference_id == source.inference_id
    (again,) = record.trials
    assert (again.status, again.reward, again.run_id) == ("completed", 1.0, solved.run_id)
    assert again.usage is None and again.binding_id is None  # no model was called, through no binding
    assert daemon_running(root) is None, "a verifier-only rerun starts no daemon and no service"
    assert sorted(p.name for p in root.runs.iterdir()) == runs_before, "and creates no run"
    assert trial_containers("ev-src-regrade1") == []

    # the kept output, changed: the verifier re-scores what is recorded
    kept = next((root.path / "evals" / "ev-src" / "trials" / solved.trial / "artifacts").rglob("hello.txt"))
    kept.write_text("something else\n")
    wrong = EvaluationRecordV1.model_validate(as_json(hitch(root, "eval", "harbor", "regrade", "ev-src", "--json"))["record"])
    assert wrong.evaluation_id == "ev-src-regrade2" and [(t.status, t.reward) for t in wrong.trials] == [("completed", 0.0)]

    # a task that verifies in the agent's own container cannot be re-scored from records
    config = root.path / "evals" / "ev-src" / "trials" / solved.trial / "config.json"
    data = json.loads(config.read_text())
    data["task"]["path"] = str(CREATE_FILE)
    config.write_text(json.dumps(data))
    refused = _error(hitch(root, "eval", "harbor", "regrade", "ev-src", "--json"))
    assert refused["code"] == "evaluation_not_regradable" and "shared-mode verifier" in refused["message"]
    assert _error(hitch(root, "eval", "harbor", "regrade", "nope", "--json"))["code"] == "evaluation_not_found"
