"""Figures of a load run: per-target results from the runner, ``summary.json`` and the side-by-side table.

The runner (:mod:`certify.load.runner`) reduces its raw timings to :func:`target_figures`; the orchestrator
merges the targets with :func:`build_summary` (schema below) and prints :func:`render_table`.

``summary.json``::

    {"schema_version": "1", "kind": "load", "engine", "api", "stream",
     "schedule": {users, spawn_rate, run_time_s, seed, max_tokens, api, stream, prompts},
     "order": ["direct", "gateway"], "machine": {...},
     "targets": {"direct"|"gateway": {requests, failures, exceptions, duration_s, rps,
                 p50_ms, p95_ms, p99_ms, ttft_p50_ms, ttft_p95_ms, itl_p50_ms, itl_p95_ms,
                 stats_csv, stats_history_csv}},
     "ratios": {"gateway_vs_direct": {rps, p50, p95, p99, ttft_p50, ttft_p95, itl_p50}}}   # only with both

Latency percentiles are computed from every successful request's time (not locust's rounded buckets);
TTFT and ITL figures are ``null`` for non-stream runs. Nothing here imports locust.
"""

from __future__ import annotations

import math
from typing import Any

from harness.stats import finite_or_none, percentile

__all__ = ["RATIO_KEYS", "build_summary", "render_table", "target_figures"]

RATIO_KEYS = {
    "rps": "rps",
    "p50": "p50_ms",
    "p95": "p95_ms",
    "p99": "p99_ms",
    "ttft_p50": "ttft_p50_ms",
    "ttft_p95": "ttft_p95_ms",
    "itl_p50": "itl_p50_ms",
}


def _r(x: float | None) -> float | None:
    x = finite_or_none(x)
    return None if x is None else round(x, 3)


def target_figures(
    *,
    requests: int,
    failures: int,
    exceptions: int,
    duration_s: float,
    latency_ms: list[float],
    ttft_ms: list[float],
    itl_ms: list[float],
) -> dict[str, Any]:
    return {
        "requests": requests,
        "failures": failures,
        "exceptions": exceptions,
        "duration_s": round(duration_s, 3),
        "rps": round(requests / duration_s, 3) if duration_s > 0 else 0.0,
        "p50_ms": _r(percentile(latency_ms, 0.50)),
        "p95_ms": _r(percentile(latency_ms, 0.95)),
        "p99_ms": _r(percentile(latency_ms, 0.99)),
        "ttft_p50_ms": _r(percentile(ttft_ms, 0.50)),
        "ttft_p95_ms": _r(percentile(ttft_ms, 0.95)),
        "itl_p50_ms": _r(percentile(itl_ms, 0.50)),
        "itl_p95_ms": _r(percentile(itl_ms, 0.95)),
    }


def _ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or b == 0 or math.isnan(b):
        return None
    return round(a / b, 4)


def build_summary(
    *,
    engine: str,
    schedule: dict[str, Any],
    order: list[str],
    targets: dict[str, dict[str, Any]],
    machine: dict[str, Any],
) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "schema_version": "1",
        "kind": "load",
        "engine": engine,
        "api": schedule["api"],
        "stream": schedule["stream"],
        "schedule": schedule,
        "order": order,
        "machine": machine,
        "targets": {
            name: {**figures, "stats_csv": f"{name}_stats.csv", "stats_history_csv": f"{name}_stats_history.csv"}
            for name, figures in targets.items()
        },
    }
    if "gateway" in targets and "direct" in targets:
        g, d = targets["gateway"], targets["direct"]
        summary["ratios"] = {"gateway_vs_direct": {k: _ratio(g.get(f), d.get(f)) for k, f in RATIO_KEYS.items()}}
    return summary


_ROWS = [
    ("requests", "requests", "{:.0f}"),
    ("failures", "failures", "{:.0f}"),
    ("req/s", "rps", "{:.1f}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p95 ms", "p95_ms", "{:.2f}"),
    ("p99 ms", "p99_ms", "{:.2f}"),
    ("TTFT p50 ms", "ttft_p50_ms", "{:.2f}"),
    ("TTFT p95 ms", "ttft_p95_ms", "{:.2f}"),
    ("ITL p50 ms", "itl_p50_ms", "{:.3f}"),
]


def render_table(summary: dict[str, Any]) -> str:
    """Targets side by side, with gateway/direct when both ran."""
    targets: dict[str, dict[str, Any]] = summary["targets"]
    names = [n for n in ("direct", "gateway") if n in targets]
    both = len(names) == 2
    header = f"{'':14s}" + "".join(f"{n:>12s}" for n in names) + (f"{'gw/direct':>12s}" if both else "")
    lines = [header]
    for label, key, fmt in _ROWS:
        cells = []
        for n in names:
            v = targets[n].get(key)
            cells.append(f"{fmt.format(v) if isinstance(v, int | float) else '-':>12s}")
        if both:
            ratio = _ratio(targets["gateway"].get(key), targets["direct"].get(key))
            cells.append(f"{ratio:>12.3f}" if ratio is not None else f"{'-':>12s}")
        lines.append(f"{label:14s}" + "".join(cells))
    s = summary["schedule"]
    lines.insert(
        0,
        f"load: {summary['engine']} engine, {s['api']} {'stream' if s['stream'] else 'non-stream'}, "
        f"{s['users']} users, spawn {s['spawn_rate']}/s, {s['run_time_s']:g} s per target, order {' -> '.join(summary['order'])}",
    )
    return "\n".join(lines)
