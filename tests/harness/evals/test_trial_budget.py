"""A Harbor trial's agent budget becomes its run's deadline (issue 28 item 3): the override Harbor is given,
else the task's own ``[agent] timeout_sec``."""

from __future__ import annotations

from pathlib import Path

from harness.evals.harbor_run import trial_budget_s

TASKS = Path(__file__).resolve().parents[3] / "fixtures" / "harbor_tasks"


def test_the_tasks_agent_timeout_is_the_budget_and_an_override_wins(tmp_path: Path) -> None:
    assert trial_budget_s(TASKS / "create-file", None) == 180.0
    assert trial_budget_s(TASKS / "create-file", 42.5) == 42.5
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "task.toml").write_text('schema_version = "1.4"\n[verifier]\ntimeout_sec = 60.0\n')
    assert trial_budget_s(bare, None) is None  # no agent budget: the run has no deadline
    assert trial_budget_s(tmp_path / "missing", None) is None
