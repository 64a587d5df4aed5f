"""Figures of two runs or evaluations side by side, each with its interval, decided by equivalence.

Owns :class:`Figure` and the two ways a figure is built:

- :func:`sample_figure` — per-request or per-trial samples (latency, tokens, rewards): each side's median with
  its bootstrap 95 % interval, and the difference of the medians (B - A) with its own bootstrap interval
  (:func:`harness.stats.added_intervals`, both samples resampled independently);
- :func:`proportion_figure` — a count of successes (trials solved): each side's Wilson 95 % interval
  (:func:`harness.stats.wilson_interval`), and the difference of the proportions with the Agresti-Caffo
  standard error (one success and one failure added to each side, honest at 0 or n successes).

:func:`decide_figures` decides them all together (:mod:`harness.compare.decide`: ``same`` / ``differs`` /
``inconclusive`` against each kind's margin, Holm over the figures). :data:`DIFFERS_EXIT_CODE` and
:data:`INCONCLUSIVE_EXIT_CODE` are what ``hitch run compare``, ``hitch eval compare`` and ``hitch catalog
reproduce`` exit with for those overall verdicts: not errors (the answer is printed whole), not success.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.compare import DIFFERS_EXIT_CODE, INCONCLUSIVE_EXIT_CODE
from harness.compare.decide import MIN_SAMPLES, Decision, FigureVerdict, Question, decide, se_of_interval
from harness.contracts.margins import FigureKind, MarginV1
from harness.stats import added_intervals, wilson_interval

__all__ = [
    "DIFFERS_EXIT_CODE",
    "INCONCLUSIVE_EXIT_CODE",
    "MIN_VERDICT_SAMPLES",
    "Figure",
    "decide_figures",
    "proportion_figure",
    "sample_figure",
]

MIN_VERDICT_SAMPLES = MIN_SAMPLES
_MEDIAN = {"p50": 0.5}
_Z95 = 1.959963984540054


@dataclass(frozen=True)
class Figure:
    name: str
    unit: str
    kind: FigureKind
    a: dict[str, Any]  # n, estimate, low, high (a median, or a proportion with its successes)
    b: dict[str, Any]
    difference: dict[str, Any]  # B - A: estimate, low, high (95 %), n
    method: Literal["bootstrap-median", "agresti-caffo"]
    decision: Decision | None = None

    @property
    def verdict(self) -> FigureVerdict:
        return self.decision.verdict if self.decision is not None else "inconclusive"

    def question(self) -> Question:
        d = self.difference
        n = min(int(self.a.get("n") or 0), int(self.b.get("n") or 0))
        return Question(self.name, self.kind, d.get("estimate"), d.get("se"), n, self.a.get("estimate"))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "kind": self.kind, "a": self.a, "b": self.b,
                "difference": self.difference, "method": self.method,
                "verdict": self.verdict if self.decision is not None else None,  # a model comparison decides nothing
                "decision": self.decision.to_json() if self.decision is not None else None}  # fmt: skip


def _side(values: Sequence[float]) -> dict[str, Any]:
    own = added_intervals(None, values, _MEDIAN)["p50"]
    return {"n": len(values), "estimate": own["estimate"], "low": own["low"], "high": own["high"]}


def sample_figure(name: str, unit: str, kind: FigureKind, a: Sequence[float], b: Sequence[float]) -> Figure:
    """Medians of ``a`` and ``b`` with intervals, and the bootstrap interval of their difference."""
    diff = added_intervals(a, b, _MEDIAN)["p50"]
    difference = {k: diff[k] for k in ("estimate", "low", "high", "n")}
    difference["se"] = se_of_interval(diff["low"], diff["high"])
    return Figure(name, unit, kind, _side(a), _side(b), difference, "bootstrap-median")


def proportion_figure(name: str, a: tuple[int, int], b: tuple[int, int]) -> Figure:
    """(successes, n) on each side: Wilson intervals, and B - A with the Agresti-Caffo standard error."""
    wa, wb = wilson_interval(*a), wilson_interval(*b)
    if a[1] == 0 or b[1] == 0:
        difference: dict[str, Any] = {"estimate": None, "low": None, "high": None, "n": 0, "se": None}
    else:
        pa, pb = (a[0] + 1) / (a[1] + 2), (b[0] + 1) / (b[1] + 2)
        se = math.sqrt(pa * (1 - pa) / (a[1] + 2) + pb * (1 - pb) / (b[1] + 2))
        d = b[0] / b[1] - a[0] / a[1]
        difference = {"estimate": d, "low": d - _Z95 * se, "high": d + _Z95 * se, "n": min(a[1], b[1]), "se": se}
    return Figure(name, "share", "share", wa, wb, difference, "agresti-caffo")


def decide_figures(figures: Sequence[Figure], margins: Mapping[str, MarginV1] | None = None) -> list[Figure]:
    """The figures with their decisions, decided together (Holm over all of them)."""
    decisions = decide([f.question() for f in figures], margins)
    return [dataclasses.replace(f, decision=d) for f, d in zip(figures, decisions, strict=True)]
