"""The decision rule of every comparison (runs, evaluations, entries): per figure ``same``, ``differs`` or
``inconclusive`` by equivalence against a margin, with the chance of any false ``differs`` controlled (Holm).

A figure to decide is a :class:`Question`: the difference B - A of one figure, its standard error ``se`` (from
the difference's bootstrap 95 % interval: width / (2 x 1.96); for two entries, each entry's own interval
combined as independent: ``sqrt(se_a^2 + se_b^2)``), the samples behind it and its kind, whose margin ``m``
(:mod:`harness.contracts.margins`) is written in the entry being reproduced.

- ``differs``: the hypothesis ``|difference| <= m`` is rejected, one-sided at level alpha, **Holm-corrected over
  all the figures decided together** (step-down: the i-th smallest p-value against alpha / (k - i + 1)). So the
  chance that a comparison calls *any* figure different while every true difference is within its margin is
  at most alpha = 5 %, however many figures it holds.
- ``same``: not ``differs``, and the difference's 90 % interval ``difference +- 1.645 se`` lies inside
  ``[-m, m]`` (two one-sided tests at 5 %; a figure is called the same only when the data show it is).
- ``inconclusive``: neither, or fewer than :data:`MIN_SAMPLES` samples on a side (a bootstrap of one or two
  values has no spread to speak of). It says what would decide it: about how many samples per side
  (the standard error shrinks as 1 / sqrt(n)).

The overall verdict (:func:`overall`): ``differs`` when anything differs; else ``inconclusive`` when a
*material* figure is (one the measurement itself marks reliable — a p99 of 30 samples is shown, decided, and
not material); else ``reproduced``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

from harness.contracts.margins import DEFAULT_MARGINS, FigureKind, MarginV1, margin_for

__all__ = [
    "ALPHA",
    "CORRECTION",
    "MIN_SAMPLES",
    "Decision",
    "FigureVerdict",
    "Overall",
    "Question",
    "decide",
    "overall",
    "se_of_interval",
]

ALPHA = 0.05
CORRECTION = "holm"
MIN_SAMPLES = 5
FigureVerdict = Literal["same", "differs", "inconclusive"]
Overall = Literal["reproduced", "differs", "inconclusive"]
_N = NormalDist()
_Z95 = _N.inv_cdf(0.975)
_Z_SAME = _N.inv_cdf(1 - ALPHA)  # one-sided: the 90 % interval inside the margin


def se_of_interval(low: float | None, high: float | None) -> float | None:
    """The standard error behind a 95 % interval (its width / 3.92); None without one."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return None
    return max(0.0, high - low) / (2 * _Z95)


@dataclass(frozen=True)
class Question:
    name: str
    kind: FigureKind
    difference: float | None  # B - A
    se: float | None
    n: int  # samples on the smaller side
    baseline: float | None  # A's estimate: the relative margin's base
    material: bool = True
    why_not_material: str = ""


@dataclass(frozen=True)
class Decision:
    name: str
    kind: FigureKind
    verdict: FigureVerdict
    margin: float
    difference: float | None
    se: float | None
    p_differs: float | None  # one-sided p of |difference| > margin, before Holm
    samples_needed: int | None  # per side, to decide an inconclusive figure
    material: bool
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "kind": self.kind, "margin": self.margin, "difference": self.difference,
            "se": self.se, "p_differs": self.p_differs, "samples_needed": self.samples_needed,
            "material": self.material, "why": self.why,
        }  # fmt: skip


def _p_differs(d: float, se: float, m: float) -> float:
    if se <= 0:
        return 0.0 if abs(d) > m else 1.0
    return 1.0 - _N.cdf((abs(d) - m) / se)


def _needed(n: int, se: float, gap: float, z: float) -> int | None:
    """Samples per side for ``z`` standard errors to fit in ``gap`` (None when no sample count would)."""
    if gap <= 0 or se <= 0 or n <= 0:
        return None
    return max(n + 1, MIN_SAMPLES, math.ceil(n * (z * se / gap) ** 2))


def _undecidable(q: Question, m: float) -> Decision:
    if q.difference is None:
        why, needed = "no samples on a side", MIN_SAMPLES
    else:
        why = f"{q.n} sample(s) on a side: at least {MIN_SAMPLES} are needed for an interval worth a verdict"
        projected = _needed(q.n, q.se or 0.0, m - abs(q.difference), _Z_SAME) if abs(q.difference) < m else None
        needed = max(MIN_SAMPLES, projected or 0)
    return Decision(q.name, q.kind, "inconclusive", m, q.difference, q.se, None, needed, q.material, why)


def decide(questions: Sequence[Question], margins: Mapping[str, MarginV1] | None = None) -> list[Decision]:
    """Every figure's decision (see the module docstring), Holm-corrected over ``questions`` together."""
    table: Mapping[str, MarginV1] = {str(k): v for k, v in DEFAULT_MARGINS.items()} if margins is None else margins
    out: dict[int, Decision] = {}
    tested: list[tuple[float, int, float]] = []  # (p, index, margin)
    for i, q in enumerate(questions):
        m = margin_for(table.get(q.kind, DEFAULT_MARGINS[q.kind]), q.baseline)
        if q.difference is None or q.se is None or q.n < MIN_SAMPLES:
            out[i] = _undecidable(q, m)
        else:
            tested.append((_p_differs(q.difference, q.se, m), i, m))
    k = len(tested)
    rejected: set[int] = set()
    for rank, (p, i, _) in enumerate(sorted(tested)):
        if p > ALPHA / (k - rank):
            break  # Holm's step-down stops at the first p-value it cannot reject
        rejected.add(i)
    z_holm = _N.inv_cdf(1 - ALPHA / max(k, 1))
    for p, i, m in tested:
        q = questions[i]
        d, se = float(q.difference or 0.0), float(q.se or 0.0)
        half = _Z_SAME * se
        if i in rejected:
            why = f"|{d:.4g}| is beyond the margin {m:.4g} (p = {p:.2g}, Holm over {k} figures)"
            out[i] = Decision(q.name, q.kind, "differs", m, d, se, p, None, q.material, why)
        elif abs(d) + half <= m:
            why = f"the 90 % interval [{d - half:.4g}, {d + half:.4g}] lies within +-{m:.4g}"
            out[i] = Decision(q.name, q.kind, "same", m, d, se, p, None, q.material, why)
        else:
            if abs(d) < m:
                needed = _needed(q.n, se, m - abs(d), _Z_SAME)
                why = f"the 90 % interval [{d - half:.4g}, {d + half:.4g}] is wider than the margin +-{m:.4g} allows"
            else:
                needed = _needed(q.n, se, abs(d) - m, z_holm)
                why = f"{d:.4g} is at or past the margin {m:.4g}, but not beyond it by more than the noise (p = {p:.2g})"
            out[i] = Decision(q.name, q.kind, "inconclusive", m, d, se, p, needed, q.material, why)
    return [_with_materiality(out[i], questions[i]) for i in range(len(questions))]


def _with_materiality(d: Decision, q: Question) -> Decision:
    if q.material or not q.why_not_material:
        return d
    return dataclasses.replace(d, why=f"{d.why}; not material: {q.why_not_material}")


def overall(decisions: Sequence[Decision], *, other_differences: bool = False) -> Overall:
    """``differs`` when a figure (or anything else compared: ``other_differences``) differs; ``inconclusive``
    when a material figure is; else ``reproduced``."""
    if other_differences or any(d.verdict == "differs" for d in decisions):
        return "differs"
    if any(d.verdict == "inconclusive" and d.material for d in decisions):
        return "inconclusive"
    return "reproduced"
