"""The evaluation records of one root, beside :class:`harness.app.run_store.RunStore`: ``evals/<evaluation-id>/``
holds ``evaluation.json`` (the record), ``plan.json`` (what a resume runs again) and ``outcomes/<slot>.json``
(each trial slot's latest outcome, as it ends).

Owns :class:`EvaluationStore`. Each file is written whole and atomically (a reader sees the previous or the next
one, never half of one); reading a record or a plan that is absent or is not one is ``evaluation_not_found``.
For example::

    store = EvaluationStore(root)
    store.write(record)  # evals/<record.evaluation_id>/evaluation.json
    store.read(record.evaluation_id) == record
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from harness.contracts.evaluation import EvaluationPlanV1, EvaluationRecordV1, TrialOutcomeV1
from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir

__all__ = ["EvaluationStore"]

_R = TypeVar("_R", EvaluationRecordV1, EvaluationPlanV1)

_PLAN = "plan.json"
_OUTCOMES = "outcomes"
_TERMINAL_RESULTS = frozenset({"completed", "failed"})  # a trial that ended by itself; cancelled/interrupted did not


@dataclass(frozen=True)
class EvaluationStore:
    root: HitchRoot

    def dir(self, evaluation_id: str) -> Path:
        return self.root.evals / evaluation_id

    def path(self, evaluation_id: str) -> Path:
        return self.dir(evaluation_id) / "evaluation.json"

    def read(self, evaluation_id: str) -> EvaluationRecordV1:
        missing = f"no evaluation {evaluation_id!r} in this root"
        return _read(EvaluationRecordV1, self.path(evaluation_id), evaluation_id, missing)

    def write(self, record: EvaluationRecordV1) -> Path:
        """Write ``record`` whole (its folder made private if new); returns its path."""
        ensure_private_dir(self.dir(record.evaluation_id))
        path = self.path(record.evaluation_id)
        atomic_write_json(path, record.to_json_dict())
        return path

    def plan_path(self, evaluation_id: str) -> Path:
        return self.dir(evaluation_id) / _PLAN

    def read_plan(self, evaluation_id: str) -> EvaluationPlanV1:
        """``evaluation_not_found`` without one (no such evaluation, or one made before plans)."""
        missing = f"no evaluation {evaluation_id!r} with a plan in this root (resume needs evals/{evaluation_id}/{_PLAN})"
        return _read(EvaluationPlanV1, self.plan_path(evaluation_id), evaluation_id, missing)

    def write_plan(self, plan: EvaluationPlanV1) -> None:
        ensure_private_dir(self.dir(plan.evaluation_id))
        atomic_write_json(self.plan_path(plan.evaluation_id), plan.to_json_dict())

    def write_outcome(self, evaluation_id: str, slot: int, outcome: TrialOutcomeV1) -> None:
        """A trial slot's latest outcome: what a resume keeps (or runs again)."""
        outcomes = ensure_private_dir(self.dir(evaluation_id) / _OUTCOMES)
        atomic_write_json(outcomes / f"{slot}.json", outcome.to_json_dict())

    def kept_outcomes(self, evaluation_id: str, slots: int) -> dict[int, TrialOutcomeV1]:
        """The outcomes a resume keeps: every slot whose trial ended by itself (completed or failed)."""
        kept = {}
        for slot in range(slots):
            with contextlib.suppress(OSError, ValueError):
                path = self.dir(evaluation_id) / _OUTCOMES / f"{slot}.json"
                outcome = TrialOutcomeV1.model_validate_json(path.read_bytes())
                if outcome.status in _TERMINAL_RESULTS:
                    kept[slot] = outcome
        return kept


def _read(model: type[_R], path: Path, evaluation_id: str, missing: str) -> _R:
    try:
        return model.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise HitchError("evaluation_not_found", missing, {"evaluation_id": evaluation_id}) from None
    except ValueError as exc:  # pydantic's ValidationError is one
        raise HitchError("evaluation_not_found", f"{path} is not an {model.__name__}", {"path": str(path)}) from exc
