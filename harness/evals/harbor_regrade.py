"""``hitch eval harbor regrade EVAL``: a verifier-only rerun of an evaluation (spec §6.3). Starts no service.

Each trial of the evaluation that Harbor kept (``evals/<eval-id>/trials/<trial>/`` with its ``result.json``) is
re-scored by Harbor's regrade (:mod:`harness.evals.harbor_driver`, a spec with ``regrade_of``): the trial's
recorded agent output and artifacts are restored and the task's verifier runs again against them, in a separate
verifier environment. No run is created, no daemon is asked, no model is called: the candidate's inference
service is not started.

Harbor regrades only tasks whose verifier can grade from recorded artifacts (``[verifier] environment_mode =
"separate"`` and the files it reads declared as ``artifacts``); a task whose verifier needs the live agent
environment is refused by Harbor per trial. When no trial could be regraded the command is
``evaluation_not_regradable`` with Harbor's reason. The result is a new evaluation record,
``evals/<eval-id>-regrade<n>/evaluation.json``, naming the evaluation it re-scored (``regrade_of``); each
outcome names the run whose output was re-scored and carries no usage (no model was called).
"""

from __future__ import annotations

import json
import queue
import re
import time
from pathlib import Path
from typing import Any

from harness.app.evaluation_store import EvaluationStore
from harness.contracts.evaluation import EvaluationRecordV1, TrialOutcomeV1, TrialTimingV1
from harness.contracts.run import RunErrorV1
from harness.errors import HitchError
from harness.evals.harbor_install import HarborInstall
from harness.evals.harbor_process import DriverProcess
from harness.evals.harbor_run import OVERLAY
from harness.evals.trial_resources import resources_of
from harness.paths import HitchRoot, ensure_private_dir

__all__ = ["regrade_evaluation"]

_REGRADE = "RegradeError"
_REGRADE_BOUND_S = 1800.0  # every verifier of the evaluation, one after another at worst


def _next_id(root: HitchRoot, evaluation_id: str) -> str:
    pattern = re.compile(re.escape(evaluation_id) + r"-regrade(\d+)$")
    evals = root.path / "evals"
    found = (
        [int(m.group(1)) for p in evals.glob(f"{evaluation_id}-regrade*") if (m := pattern.match(p.name))]
        if evals.is_dir()
        else []
    )
    return f"{evaluation_id}-regrade{max(found, default=0) + 1}"


def _drive(install: HarborInstall, specs: list[dict[str, Any]], cwd: Path) -> dict[str, dict[str, Any]]:
    """Run the driver on ``specs`` to their end; trial name -> its ``finished`` event."""
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    driver = DriverProcess(install, cwd, [], events)
    try:
        for spec in specs:
            if not driver.start_trial(spec):
                raise HitchError("harness_run_failed", "Harbor's driver takes no more trials (see driver.log)", {})
    finally:
        driver.close(timeout_s=_REGRADE_BOUND_S)  # no more input: it ends once the regrades have
    finished: dict[str, dict[str, Any]] = {}
    while not events.empty():
        event = events.get_nowait()
        if event.get("event") == "finished":
            finished[str(event.get("trial"))] = event
    return finished


def _outcome(name: str, source: TrialOutcomeV1, event: dict[str, Any]) -> TrialOutcomeV1:
    exc = event.get("exception") or {}
    reward = event.get("reward")
    rewards = event.get("rewards")
    error = None
    if exc or reward is None:
        message = f"Harbor's regrade raised {exc.get('type')}: {str(exc.get('message'))[:500]}" if exc else "no reward"
        error = RunErrorV1(code="harness_run_failed", message=message)
    timing = event.get("timing")
    return TrialOutcomeV1(
        trial=name,
        task=source.task,
        run_id=source.run_id,  # the run whose recorded output was re-scored
        binding_id=None,
        status="failed" if error is not None else "completed",
        error=error,
        reward=float(reward) if isinstance(reward, int | float) else None,
        rewards={str(k): float(v) for k, v in rewards.items()} if isinstance(rewards, dict) else None,
        harbor_exception=exc.get("type"),
        usage=None,  # no model was called
        service=None,
        timing=TrialTimingV1(**timing) if isinstance(timing, dict) else None,
    )


def regrade_evaluation(root: HitchRoot, install: HarborInstall, evaluation_id: str) -> EvaluationRecordV1:
    """Re-score every kept trial of ``evaluation_id``; the new record (see the module docstring)."""
    store = EvaluationStore(root)
    source = store.read(evaluation_id)
    source_dir = store.dir(evaluation_id)
    kept = [
        (t, source_dir / "trials" / t.trial) for t in source.trials if (source_dir / "trials" / t.trial / "result.json").is_file()
    ]
    if not kept:
        raise HitchError(
            "evaluation_not_regradable",
            f"evaluation {evaluation_id} kept no Harbor trial output to re-score",
            {"evaluation_id": evaluation_id},
        )
    new_id = _next_id(root, evaluation_id)
    out_dir = ensure_private_dir(store.dir(new_id))
    overlay = out_dir / "overlay.compose.yaml"
    overlay.write_text(OVERLAY)
    specs = []
    for i, (trial, trial_dir) in enumerate(kept):
        task_path = json.loads((trial_dir / "config.json").read_text(encoding="utf-8"))["task"]["path"]
        limits = resources_of(Path(task_path))  # the verifier's container gets the task's limits, as the trial's did
        specs.append({"name": f"{new_id}-{trial.task}-{i}", "task_path": task_path, "trials_dir": str(out_dir / "trials"),
                      "regrade_of": str(trial_dir), "overlays": [str(overlay)], "cpus": limits.cpus,
                      "memory_mb": limits.memory_mb})  # fmt: skip
    started = time.time()
    events = _drive(install, specs, out_dir)
    outcomes = [
        _outcome(spec["name"], trial, events.get(spec["name"], {"exception": {"type": "DriverError", "message": "no result"}}))
        for spec, (trial, _) in zip(specs, kept, strict=True)
    ]
    refused = [o for o in outcomes if o.harbor_exception == _REGRADE]
    if refused and len(refused) == len(outcomes):
        reason = refused[0].error.message if refused[0].error is not None else ""
        raise HitchError(
            "evaluation_not_regradable",
            f"Harbor cannot regrade {evaluation_id}'s trials: {reason}",
            {"evaluation_id": evaluation_id, "trials": [o.trial for o in refused]},
        )
    record = EvaluationRecordV1(
        evaluation_id=new_id,
        tool_version=str(install.versions.get("harbor", "unknown")),
        agent=source.agent,
        model_connection="none",
        environment="docker",
        inference_id=source.inference_id,
        engine=source.engine,
        started_at=started,
        finished_at=time.time(),
        trials=outcomes,
        regrade_of=evaluation_id,
    )
    store.write(record)
    return record
