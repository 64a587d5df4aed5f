"""The one statistics module of the benchmarks: percentiles (and, as they come, their intervals).

Every figure the suites, ``hitch bench overhead`` and ``hitch bench load`` print is computed here, so a p95
means the same thing on every page: linear interpolation between the closest ranks (numpy's default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["finite_or_none", "percentile"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between closest ranks; NaN for no values."""
    s = sorted(values)
    if not s:
        return math.nan
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def finite_or_none(value: float | None) -> float | None:
    """A figure for a record or a page: NaN/inf (no samples) become None."""
    return value if value is not None and math.isfinite(value) else None
