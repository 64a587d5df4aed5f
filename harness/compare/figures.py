"""Figures of two runs or evaluations side by side, each with its interval, and the verdict "differs beyond noise".

Owns :class:`Figure` and the two ways a figure is built:

- :func:`sample_figure` — per-request or per-trial samples (latency, tokens, rewards): each side's median with
  its bootstrap 95 % interval, and the difference of the medians (B - A) with its own bootstrap interval
  (:func:`harness.stats.added_intervals`, both samples resampled independently). The figure *differs beyond
  noise* when that interval excludes 0. With fewer than :data:`MIN_VERDICT_SAMPLES` samples on a side a
  bootstrap interval is not worth a verdict (two values resample into four outcomes): the figure is shown and
  marked ``too_few``, never ``differs``.
- :func:`proportion_figure` — a count of successes (trials solved): each side's Wilson 95 % interval
  (:func:`harness.stats.wilson_interval`); it differs beyond noise when the two intervals do not overlap (a
  conservative test: overlapping intervals are never called a difference).

:data:`DIFFERS_EXIT_CODE` is what ``hitch run compare``, ``hitch eval compare`` and ``hitch catalog reproduce``
exit with when something differs beyond noise: not an error (the answer is printed whole), not success.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.stats import added_intervals, wilson_interval

__all__ = ["DIFFERS_EXIT_CODE", "MIN_VERDICT_SAMPLES", "Figure", "Verdict", "proportion_figure", "sample_figure"]

DIFFERS_EXIT_CODE = 10
MIN_VERDICT_SAMPLES = 5
Verdict = Literal["same", "differs", "too_few"]
_MEDIAN = {"p50": 0.5}


@dataclass(frozen=True)
class Figure:
    name: str
    unit: str
    a: dict[str, Any]  # n, estimate, low, high (a median, or a proportion with its successes)
    b: dict[str, Any]
    difference: dict[str, Any] | None  # B - A with its interval (samples only)
    verdict: Verdict
    method: Literal["bootstrap-median", "wilson"]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "a": self.a, "b": self.b, "difference": self.difference,
                "verdict": self.verdict, "method": self.method}  # fmt: skip


def _side(values: Sequence[float]) -> dict[str, Any]:
    own = added_intervals(None, values, _MEDIAN)["p50"]
    return {"n": len(values), "estimate": own["estimate"], "low": own["low"], "high": own["high"]}


def sample_figure(name: str, unit: str, a: Sequence[float], b: Sequence[float]) -> Figure:
    """Medians of ``a`` and ``b`` with intervals; the verdict on the bootstrap interval of their difference."""
    diff = added_intervals(a, b, _MEDIAN)["p50"]
    difference = {k: diff[k] for k in ("estimate", "low", "high", "n")}
    if min(len(a), len(b)) < MIN_VERDICT_SAMPLES:
        verdict: Verdict = "too_few"
    else:
        verdict = "same" if diff["noise"] else "differs"
    return Figure(name, unit, _side(a), _side(b), difference, verdict, "bootstrap-median")


def proportion_figure(name: str, a: tuple[int, int], b: tuple[int, int]) -> Figure:
    """(successes, n) on each side: Wilson intervals; differs when they do not overlap."""
    wa, wb = wilson_interval(*a), wilson_interval(*b)
    if wa["n"] == 0 or wb["n"] == 0:
        verdict: Verdict = "too_few"
    else:
        verdict = "differs" if wa["high"] < wb["low"] or wb["high"] < wa["low"] else "same"
    return Figure(name, "share", wa, wb, None, verdict, "wilson")
