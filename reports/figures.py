"""How the report pages say a figure: numbers with their intervals, durations in a unit a person reads.

One place for it, so ``1.54 ms (95 % 1.40 to 1.70)`` and ``1.9 min`` read the same on every page.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from reports.svg import Point

__all__ = ["PERCENTILES", "duration_words", "ms", "number", "point"]

PERCENTILES = ("p50", "p95", "p99")


def number(value: Any) -> float | None:
    """A finite float, or None (bools, strings, NaN and missing values are no figure)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _num(v: float, signed: bool) -> str:
    digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def ms(interval: Any, *, signed: bool = False) -> str:
    """An interval mapping (``estimate``, ``low``, ``high``) as ``1.54 ms (95 % 1.40 to 1.70)``; ``-`` when missing."""
    if not isinstance(interval, Mapping) or number(interval.get("estimate")) is None:
        return "-"
    text = f"{_num(float(interval['estimate']), signed)} ms"
    low, high = number(interval.get("low")), number(interval.get("high"))
    if low is not None and high is not None:
        text += f" (95 % {_num(low, signed)} to {_num(high, signed)})"
    return text


def point(interval: Any) -> Point | None:
    """An interval mapping as a chart :class:`~reports.svg.Point` (None when it holds no estimate)."""
    if not isinstance(interval, Mapping) or number(interval.get("estimate")) is None:
        return None
    return Point(float(interval["estimate"]), number(interval.get("low")), number(interval.get("high")))


def duration_words(value_ms: float | None) -> str:
    """Milliseconds in the unit that reads best: ``412 ms``, ``9.1 s``, ``1.9 min``."""
    if value_ms is None or not math.isfinite(value_ms):
        return "-"
    if abs(value_ms) < 1000:
        return f"{value_ms:.0f} ms"
    if abs(value_ms) < 120_000:
        return f"{value_ms / 1000:.1f} s"
    return f"{value_ms / 60_000:.1f} min"
