"""``hitch eval compare A B``: two Harbor evaluations side by side, under the strict conditions.

An evaluation is its record (``evals/<id>/evaluation.json``) and the sealed evidence of each trial's run
(:func:`harness.compare.runs.load_run_side`). The conditions are the runs' (same model, inference id, machine
and cache condition); the cache condition of an evaluation is its first trial's (``cold`` when the evaluation
started its own service, ``warm`` when it found one running), and every trial must share the machine.

Figures: trials solved (reward >= 1.0, Harbor's full credit) with Wilson intervals; the per-trial reward,
requests, input and output tokens and agent time (bootstrap intervals of the medians); and the per-request
figures of all trials' attempt rows pooled; all decided together by equivalence
(:func:`harness.compare.figures.decide_figures`). The outcome of each task, side by side (trials solved of
trials run), is listed with the tasks whose outcome changed.

``--across-models``: the model may differ, every other condition of the trials' runs must match
(:mod:`harness.compare.across_models`); the answer is a model comparison (figures with intervals and the
per-task outcome changes), never a reproduction verdict.
"""

from __future__ import annotations

from typing import Any

from harness.app.evaluation_store import EvaluationStore
from harness.compare.conditions import Condition, refuse_itself, require_comparable
from harness.compare.figures import Figure, decide_figures, proportion_figure, sample_figure
from harness.compare.runs import Comparison, RunSide, load_run_side, row_figures
from harness.contracts.evaluation import EvaluationRecordV1
from harness.errors import HitchError
from harness.paths import HitchRoot

__all__ = ["SOLVED_REWARD", "compare_evals"]

SOLVED_REWARD = 1.0


def _sides(root: HitchRoot, record: EvaluationRecordV1, notes: list[str]) -> list[RunSide]:
    sides = []
    for trial in record.trials:
        try:
            sides.append(load_run_side(root, trial.run_id))
        except HitchError as exc:
            if exc.code != "runs_not_comparable":
                raise
            notes.append(f"{record.evaluation_id}: trial {trial.trial} has no execution evidence ({trial.status})")
    if not sides:
        raise HitchError(
            "runs_not_comparable",
            f"evaluation {record.evaluation_id} has no trial that reached the model",
            {"evaluation_id": record.evaluation_id},
        )
    return sides


def _one(values: set[str], what: str, evaluation_id: str) -> str:
    if len(values) != 1:
        raise HitchError(
            "runs_not_comparable",
            f"the trials of {evaluation_id} differ among themselves in {what}",
            {"evaluation_id": evaluation_id, what: sorted(values)},
        )
    return next(iter(values))


def _facts(side: RunSide) -> dict[str, str]:
    return {"model_id": side.model_id, "inference_id": side.execution.inference_id, "hardware": side.hardware}


def _conditions(ea: EvaluationRecordV1, sa: list[RunSide], eb: EvaluationRecordV1, sb: list[RunSide]) -> list[Condition]:
    out = []
    for name in ("model_id", "inference_id", "hardware"):
        a = _one({_facts(s)[name] for s in sa}, name, ea.evaluation_id)
        b = _one({_facts(s)[name] for s in sb}, name, eb.evaluation_id)
        out.append(Condition(name, a, b))
    out.append(Condition("cache_condition", sa[0].execution.cache_condition, sb[0].execution.cache_condition))
    return out


def _per_trial(ea: EvaluationRecordV1, eb: EvaluationRecordV1) -> list[Figure]:
    def rewards(e: EvaluationRecordV1) -> list[float]:
        return [t.reward for t in e.trials if t.reward is not None]

    def usage(e: EvaluationRecordV1, attr: str) -> list[float]:
        return [float(getattr(t.usage, attr)) for t in e.trials if t.usage is not None]

    def agent_s(e: EvaluationRecordV1) -> list[float]:
        return [t.timing.agent_execution_s for t in e.trials if t.timing is not None and t.timing.agent_execution_s is not None]

    def solved(e: EvaluationRecordV1) -> tuple[int, int]:
        return sum(r >= SOLVED_REWARD for r in rewards(e)), len(e.trials)

    return [
        proportion_figure("trials_solved", solved(ea), solved(eb)),
        sample_figure("reward", "reward", "count", rewards(ea), rewards(eb)),
        sample_figure("requests_per_trial", "requests", "count", usage(ea, "requests"), usage(eb, "requests")),
        sample_figure("input_tokens_per_trial", "tokens", "token_count", usage(ea, "input_tokens"), usage(eb, "input_tokens")),
        sample_figure("output_tokens_per_trial", "tokens", "token_count", usage(ea, "output_tokens"), usage(eb, "output_tokens")),
        sample_figure("agent_execution_s", "s", "agent_time", agent_s(ea), agent_s(eb)),
    ]


def _task_outcomes(ea: EvaluationRecordV1, eb: EvaluationRecordV1) -> list[dict[str, Any]]:
    """Per task: trials solved of trials run on each side, and whether the outcome changed."""

    def by_task(e: EvaluationRecordV1) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for t in e.trials:
            solved, n = out.get(t.task, (0, 0))
            out[t.task] = (solved + int(t.reward is not None and t.reward >= SOLVED_REWARD), n + 1)
        return out

    ta, tb = by_task(ea), by_task(eb)
    rows = []
    for task in sorted(set(ta) | set(tb)):
        a, b = ta.get(task), tb.get(task)
        share = [None if x is None else x[0] / x[1] for x in (a, b)]
        rows.append({"task": task, "a": a and {"solved": a[0], "trials": a[1]}, "b": b and {"solved": b[0], "trials": b[1]},
                     "changed": share[0] != share[1]})  # fmt: skip
    return rows


def compare_evals(root: HitchRoot, a_id: str, b_id: str, *, across_models: bool = False) -> Comparison:
    """Compare two evaluations (``runs_not_comparable`` when a strict condition differs; with ``across_models``
    the model may differ and the answer is a model comparison)."""
    refuse_itself("evaluation", a_id, b_id)
    store = EvaluationStore(root)
    ea, eb = store.read(a_id), store.read(b_id)
    notes: list[str] = []
    sa, sb = _sides(root, ea, notes), _sides(root, eb, notes)
    if across_models:
        from harness.compare.across_models import model_conditions

        for name in ("model_id", "inference_id", "hardware"):  # each side's trials agree among themselves
            _one({_facts(s)[name] for s in sa}, name, ea.evaluation_id)
            _one({_facts(s)[name] for s in sb}, name, eb.evaluation_id)
        conditions, derived = model_conditions(sa[0], sb[0])
        require_comparable("evaluation", a_id, b_id, conditions, across_models=True)
        notes += derived
    else:
        conditions = _conditions(ea, sa, eb, sb)
        require_comparable("evaluation", a_id, b_id, conditions)
    for side in (*sa, *sb):
        notes.extend(side.notes)
    pooled = row_figures([r for s in sa for r in s.rows], [r for s in sb for r in s.rows])
    figures = [*_per_trial(ea, eb), *pooled]
    tasks = _task_outcomes(ea, eb)
    if across_models:
        return Comparison("evaluation", a_id, b_id, conditions, figures, notes, True, tasks)
    return Comparison("evaluation", a_id, b_id, conditions, decide_figures(figures), notes, False, tasks)
