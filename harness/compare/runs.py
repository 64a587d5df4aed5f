"""``hitch run compare A B``: two runs' evidence side by side, under the strict conditions.

A run is read from its sealed evidence set (``run.json``, ``inference.ref.json`` and the files it names,
re-hashed first by :func:`harness.run_ref.verify_run`: a changed set is ``run_evidence_changed``, never
compared; a run written before refs existed is compared with a note), its execution evidence (any schema
version) and its attempt rows. The figures come from the rows of requests that reached an answer (completed
or incomplete): end-to-end latency, time to first token (streams), the engine's share, input and output
tokens; plus the request count by status as a note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.compare.conditions import Condition, require_comparable
from harness.compare.figures import Figure, sample_figure
from harness.contracts.events import RequestEvidenceV1
from harness.contracts.evidence import ExecutionEvidenceSchema1, InferenceExecutionEvidenceV1, parse_execution_evidence
from harness.contracts.run import RunRecordV1
from harness.devices.fingerprint import machine_identity
from harness.errors import HitchError
from harness.ids import digest_json
from harness.paths import HitchRoot
from harness.run_ref import verify_run

__all__ = ["Comparison", "RunSide", "compare_runs", "load_run_side", "row_figures", "run_conditions"]

_ANSWERED = frozenset({"completed", "incomplete"})
# (figure name, unit, row field); a row without the field (a unary request's TTFT) adds no sample
ROW_FIGURES = (
    ("e2e_ms", "ms", "e2e_ms"),
    ("ttft_ms", "ms", "ttft_ms"),
    ("engine_ms", "ms", "engine_ms"),
    ("input_tokens", "tokens", "input_tokens"),
    ("output_tokens", "tokens", "output_tokens"),
)


@dataclass
class RunSide:
    run_id: str
    record: RunRecordV1
    execution: InferenceExecutionEvidenceV1 | ExecutionEvidenceSchema1
    model_id: str
    rows: list[RequestEvidenceV1]
    notes: list[str] = field(default_factory=list)

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
    return RunSide(run_id, record, execution, model_id or "unknown", rows, notes)


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
    for name, unit, attr in ROW_FIGURES:
        a, b = _samples(a_rows, attr), _samples(b_rows, attr)
        if a or b:
            out.append(sample_figure(name, unit, a, b))
    return out


@dataclass
class Comparison:
    kind: str  # run | evaluation
    a: str
    b: str
    conditions: list[Condition]
    figures: list[Figure]
    notes: list[str] = field(default_factory=list)

    @property
    def differences(self) -> list[str]:
        return [f.name for f in self.figures if f.verdict == "differs"]

    @property
    def differs(self) -> bool:
        return bool(self.differences)

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "comparable": True,
            "conditions": [c.to_json() for c in self.conditions],
            "figures": [f.to_json() for f in self.figures],
            "differs": self.differs,
            "differences": self.differences,
            "notes": self.notes,
        }


def _statuses(rows: list[RequestEvidenceV1]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r.status] = out.get(r.status, 0) + 1
    return dict(sorted(out.items()))


def compare_runs(root: HitchRoot, a_id: str, b_id: str) -> Comparison:
    """Compare two finished runs (``runs_not_comparable`` when a strict condition differs)."""
    a, b = load_run_side(root, a_id), load_run_side(root, b_id)
    conditions = run_conditions(a, b)
    require_comparable("run", a_id, b_id, conditions)
    notes = [*a.notes, *b.notes, f"requests by status: {a_id} {_statuses(a.rows)}, {b_id} {_statuses(b.rows)}"]
    return Comparison("run", a_id, b_id, conditions, row_figures(a.rows, b.rows), notes)
