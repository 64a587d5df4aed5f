"""``hitch run compare A B``: two runs' evidence side by side, under the strict conditions.

A run is read from its sealed evidence set (``run.json``, ``inference.ref.json`` and the files it names,
re-hashed first by :func:`harness.run_ref.verify_run`: a changed set is ``run_evidence_changed``, never
compared; a run written before refs existed is compared with a note), its execution evidence (any schema
version) and its attempt rows. The figures come from the rows of requests that reached an answer (completed
or incomplete): end-to-end latency, time to first token (streams), the engine's share, input and output
tokens; plus the request count by status as a note. They are decided together by equivalence
(:func:`harness.compare.figures.decide_figures`): the overall verdict is ``reproduced``, ``differs`` or
``inconclusive`` (with how many samples would decide it). A run compared with itself is refused
(``comparison_with_itself``): it would show nothing but its own identity.

``--across-models`` (:func:`compare_runs` with ``across_models=True``, spec §6.3's model comparison): the model
may differ; every other strict condition must match (:mod:`harness.compare.across_models`); the output is the
per-figure differences with their intervals, never a reproduction verdict.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.compare.conditions import Condition, refuse_itself, require_comparable
from harness.compare.decide import ALPHA, CORRECTION, Overall, overall
from harness.compare.figures import Figure, decide_figures, sample_figure
from harness.contracts.events import RequestEvidenceV1
from harness.contracts.evidence import ExecutionEvidenceSchema1, InferenceExecutionEvidenceV1, parse_execution_evidence
from harness.contracts.lock import InferenceLockV1
from harness.contracts.margins import DEFAULT_MARGINS, FigureKind
from harness.contracts.run import RunRecordV1
from harness.devices.fingerprint import machine_identity
from harness.errors import HitchError
from harness.ids import digest_json
from harness.paths import HitchRoot
from harness.run_ref import verify_run

__all__ = ["Comparison", "RunSide", "compare_runs", "load_run_side", "row_figures", "run_conditions"]

_ANSWERED = frozenset({"completed", "incomplete"})
# (figure name, unit, row field); a row without the field (a unary request's TTFT) adds no sample
ROW_FIGURES: tuple[tuple[str, str, FigureKind, str], ...] = (
    ("e2e_ms", "ms", "latency", "e2e_ms"),
    ("ttft_ms", "ms", "latency", "ttft_ms"),
    ("engine_ms", "ms", "latency", "engine_ms"),
    ("input_tokens", "tokens", "token_count", "input_tokens"),
    ("output_tokens", "tokens", "token_count", "output_tokens"),
)


@dataclass
class RunSide:
    run_id: str
    record: RunRecordV1
    execution: InferenceExecutionEvidenceV1 | ExecutionEvidenceSchema1
    model_id: str
    rows: list[RequestEvidenceV1]
    notes: list[str] = field(default_factory=list)
    lock: InferenceLockV1 | None = None  # the run's sealed lock, where it kept one

    @property
    def hardware(self) -> str:
        """A digest of the machine identity (the fingerprint's hardware, not its load)."""
        ev = self.execution
        if isinstance(ev, ExecutionEvidenceSchema1):
            return digest_json({"schema1": ev.hardware.to_json_dict()})
        return digest_json(machine_identity(ev.hardware))


def _lock_model_id(run_dir: Path) -> str | None:
    try:
        value = json.loads((run_dir / "inference" / "lock.json").read_text(encoding="utf-8")).get("model_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def load_run_side(root: HitchRoot, run_id: str) -> RunSide:
    """A finished run's evidence, verified against its sealed ref (see the module docstring)."""
    check = verify_run(root, run_id)
    notes = []
    if not check.ok:
        if [c.what for c in check.changes] == ["unsealed"]:
            notes.append(f"{run_id}: no sealed evidence set (written before inference.ref.json existed): not re-hashed")
        else:
            raise HitchError(
                "run_evidence_changed",
                f"run {run_id}'s evidence changed since it was sealed; it is not compared",
                {"run_id": run_id, "changes": [c.to_json() for c in check.changes]},
            )
    run_dir = root.runs / run_id
    record = RunRecordV1.model_validate_json((run_dir / "run.json").read_bytes())
    try:
        execution = parse_execution_evidence((run_dir / "inference" / "execution.json").read_bytes())
    except (OSError, ValidationError) as exc:
        raise HitchError(
            "runs_not_comparable", f"run {run_id} has no execution evidence to compare ({record.status})", {"run_id": run_id}
        ) from exc
    model_id = getattr(execution, "model_id", None) or _lock_model_id(run_dir)
    rows: list[RequestEvidenceV1] = []
    attempts = run_dir / "inference" / "attempts.jsonl"
    if attempts.is_file():
        rows = [RequestEvidenceV1.model_validate_json(line) for line in attempts.read_text(encoding="utf-8").splitlines() if line]
    lock = None
    with contextlib.suppress(OSError, ValidationError):
        lock = InferenceLockV1.model_validate_json((run_dir / "inference" / "lock.json").read_bytes())
    return RunSide(run_id, record, execution, model_id or "unknown", rows, notes, lock)


def run_conditions(a: RunSide, b: RunSide) -> list[Condition]:
    return [
        Condition("model_id", a.model_id, b.model_id),
        Condition("inference_id", a.execution.inference_id, b.execution.inference_id),
        Condition("hardware", a.hardware, b.hardware),
        Condition("cache_condition", a.execution.cache_condition, b.execution.cache_condition),
    ]


def _samples(rows: list[RequestEvidenceV1], attr: str) -> list[float]:
    return [float(v) for r in rows if r.status in _ANSWERED and (v := getattr(r, attr)) is not None]


def row_figures(a_rows: list[RequestEvidenceV1], b_rows: list[RequestEvidenceV1]) -> list[Figure]:
    """The per-request figures of two sets of attempt rows (see :data:`ROW_FIGURES`)."""
    out = []
    for name, unit, kind, attr in ROW_FIGURES:
        a, b = _samples(a_rows, attr), _samples(b_rows, attr)
        if a or b:
            out.append(sample_figure(name, unit, kind, a, b))
    return out


@dataclass
class Comparison:
    kind: str  # run | evaluation
    a: str
    b: str
    conditions: list[Condition]
    figures: list[Figure]  # decided (decide_figures), except in a model comparison
    notes: list[str] = field(default_factory=list)
    across_models: bool = False
    tasks: list[dict[str, Any]] = field(default_factory=list)  # per-task outcomes (evaluations)

    @property
    def differences(self) -> list[str]:
        return [f.name for f in self.figures if f.verdict == "differs"]

    @property
    def differs(self) -> bool:
        return bool(self.differences)

    @property
    def undecided(self) -> list[Figure]:
        return [f for f in self.figures if f.verdict == "inconclusive" and f.decision is not None and f.decision.material]

    @property
    def verdict(self) -> Overall | None:
        """The reproduction verdict; None for a model comparison (it never is one)."""
        if self.across_models:
            return None
        return overall([f.decision for f in self.figures if f.decision is not None])

    def to_decide(self) -> list[str]:
        """What would decide each inconclusive figure, in words."""
        out = []
        for f in self.undecided:
            d = f.decision
            assert d is not None
            more = f"about {d.samples_needed} samples a side" if d.samples_needed else "more samples a side"
            out.append(f"{f.name}: {more} ({d.why})")
        return out

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "a": self.a,
            "b": self.b,
            "comparable": True,
            "mode": "models" if self.across_models else "reproduction",
            "conditions": [c.to_json() for c in self.conditions],
            "figures": [f.to_json() for f in self.figures],
            "notes": self.notes,
        }
        if self.across_models:
            return {**body, "tasks": self.tasks}
        return {
            **body,
            "verdict": self.verdict,
            "differs": self.differs,
            "differences": self.differences,
            "inconclusive": [f.name for f in self.undecided],
            "to_decide": self.to_decide(),
            "rule": rule_json(),
            **({"tasks": self.tasks} if self.tasks else {}),
        }


def rule_json() -> dict[str, Any]:
    """The decision rule, as a comparison's JSON states it."""
    return {
        "alpha": ALPHA,
        "correction": CORRECTION,
        "same": "the difference's 90 % interval within the margin",
        "margins": {k: m.to_json_dict() for k, m in DEFAULT_MARGINS.items()},
    }


def _statuses(rows: list[RequestEvidenceV1]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r.status] = out.get(r.status, 0) + 1
    return dict(sorted(out.items()))


def compare_runs(root: HitchRoot, a_id: str, b_id: str, *, across_models: bool = False) -> Comparison:
    """Compare two finished runs (``runs_not_comparable`` when a strict condition differs; with
    ``across_models`` the model may differ and the answer is a model comparison)."""
    refuse_itself("run", a_id, b_id)
    a, b = load_run_side(root, a_id), load_run_side(root, b_id)
    notes = [*a.notes, *b.notes, f"requests by status: {a_id} {_statuses(a.rows)}, {b_id} {_statuses(b.rows)}"]
    if across_models:
        from harness.compare.across_models import model_conditions

        conditions, derived = model_conditions(a, b)
        require_comparable("run", a_id, b_id, conditions, across_models=True)
        return Comparison("run", a_id, b_id, conditions, row_figures(a.rows, b.rows), [*notes, *derived], True)
    conditions = run_conditions(a, b)
    require_comparable("run", a_id, b_id, conditions)
    return Comparison("run", a_id, b_id, conditions, decide_figures(row_figures(a.rows, b.rows)), notes)
