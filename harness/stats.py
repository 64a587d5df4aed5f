"""The one statistics module: percentiles, their bootstrap intervals, and Wilson intervals of proportions.

Every figure the suites, ``hitch bench overhead``, ``hitch bench load`` and the comparisons of runs,
evaluations and entries (:mod:`harness.compare`) print is computed here, so a p95 means the same thing on
every page: linear interpolation between the closest ranks (numpy's default).

An *added* figure (one arm's percentile minus another's, e.g. gateway - direct) comes with a percentile
bootstrap 95 % interval: both samples are resampled with replacement, independently, ``resamples`` times
from a fixed seed (the same inputs always give the same interval). A quantile is *reliable* only when at
least one sample lies beyond it on each side in expectation: n >= 1 / min(q, 1 - q), so a p99 needs 100
samples per arm; below that the figure is still computed and marked unreliable. An interval that holds 0
means the difference is not told apart from noise (a negative estimate included).

A proportion (trials solved out of trials run) gets the Wilson score interval (:func:`wilson_interval`): unlike
the normal approximation it stays inside [0, 1] and is honest for small n and for 0 or n successes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "added_intervals",
    "finite_or_none",
    "min_samples",
    "percentile",
    "ratio_interval",
    "wilson_interval",
]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 13
CONFIDENCE = 0.95
_Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile: a two-sided 95 % interval


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between closest ranks; NaN for no values."""
    s = sorted(values)
    if not s:
        return math.nan
    return _sorted_quantile(s, q)


def _sorted_quantile(s: Sequence[float], q: float) -> float:
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def finite_or_none(value: float | None) -> float | None:
    """A figure for a record or a page: NaN/inf (no samples) become None."""
    return value if value is not None and math.isfinite(value) else None


def min_samples(q: float) -> int:
    """Samples per arm for the ``q`` quantile to be reliable (see the module docstring): 100 for p99."""
    tail = min(q, 1 - q)
    if tail <= 0:
        raise ValueError("the minimum and the maximum have no sample beyond them; use a quantile inside (0, 1)")
    return math.ceil(round(1 / tail, 9))  # rounded first: 1 / (1 - 0.99) is 100.00000000000009


def added_intervals(
    base: Sequence[float] | None,
    other: Sequence[float],
    qs: dict[str, float],
    *,
    scale: float = 1.0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, dict[str, Any]]:
    """Per named quantile: ``other``'s percentile minus ``base``'s (times ``scale``, e.g. 1000 for s -> ms)
    with its bootstrap 95 % interval. Each entry: ``estimate``, ``low``, ``high`` (None without samples),
    ``n`` (the smaller sample), ``reliable`` and ``noise`` (the interval holds 0). ``base=None``: the
    quantiles of ``other`` itself (a sample that already is a difference, e.g. a per-request residence)."""
    n = len(other) if base is None else min(len(base), len(other))
    if n == 0:
        return {p: {"estimate": None, "low": None, "high": None, "n": 0, "reliable": False, "noise": True} for p in qs}
    sb, so = (None if base is None else sorted(base)), sorted(other)
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {p: [] for p in qs}
    no = len(so)
    for _ in range(resamples):
        rb = None if sb is None else sorted(rng.choices(sb, k=len(sb)))
        ro = sorted(rng.choices(so, k=no))
        for p, q in qs.items():
            draws[p].append(_sorted_quantile(ro, q) - (0.0 if rb is None else _sorted_quantile(rb, q)))
    alpha = (1 - CONFIDENCE) / 2
    out: dict[str, dict[str, Any]] = {}
    for p, q in qs.items():
        d = sorted(draws[p])
        low, high = _sorted_quantile(d, alpha) * scale, _sorted_quantile(d, 1 - alpha) * scale
        out[p] = {
            "estimate": (_sorted_quantile(so, q) - (0.0 if sb is None else _sorted_quantile(sb, q))) * scale,
            "low": low,
            "high": high,
            "n": n,
            "reliable": n >= min_samples(q),
            "noise": low <= 0 <= high,
        }
    return out


def ratio_interval(
    pairs: Sequence[tuple[float, float]], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> dict[str, Any]:
    """The ratio of sums ``sum(a) / sum(b)`` over paired measurements (a round's two arms) with its bootstrap 95 %
    interval, the pairs resampled together: ``estimate``, ``low``, ``high`` (None without a positive ``b``
    sum) and ``n``."""
    n = len(pairs)
    total_b = sum(b for _, b in pairs)
    if n == 0 or total_b <= 0:
        return {"estimate": None, "low": None, "high": None, "n": n}
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        picked = rng.choices(pairs, k=n)
        den = sum(b for _, b in picked)
        if den > 0:
            draws.append(sum(a for a, _ in picked) / den)
    draws.sort()
    alpha = (1 - CONFIDENCE) / 2
    return {
        "estimate": sum(a for a, _ in pairs) / total_b,
        "low": _sorted_quantile(draws, alpha),
        "high": _sorted_quantile(draws, 1 - alpha),
        "n": n,
    }


def wilson_interval(successes: int, n: int) -> dict[str, Any]:
    """The Wilson score 95 % interval of ``successes`` out of ``n``: ``estimate`` (the observed proportion),
    ``low``, ``high``, ``n`` and ``successes``; ``estimate``/``low``/``high`` are None when ``n`` is 0."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n]: {successes} of {n}")
    if n == 0:
        return {"estimate": None, "low": None, "high": None, "n": 0, "successes": 0}
    p = successes / n
    z2 = _Z95 * _Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return {"estimate": p, "low": max(0.0, centre - half), "high": min(1.0, centre + half), "n": n, "successes": successes}
