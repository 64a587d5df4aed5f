"""The run page's gateway-overhead section: the decided figure first, then the black-box figures, named as such.

Two inputs, each optional:

- the predicate's ``metrics`` (what is signed): ``gateway_added_latency_ms`` — schema 3's decided figure
  (per kind: the time in the gateway and the paired shift, each with its 95 % interval, and the §15.4
  verdict) — and ``gateway_latency_difference_ms``, the black-box percentile difference with its intervals.
  A schema-2 entry's ``gateway_added_latency_ms`` is that difference without an interval: it is tabled as
  such and never charted;
- ``overhead``: the JSON ``python -m certify.perf --out`` writes (``results.{unary,stream}.{gateway,
  reference,direct}``), for the per-arm table (the reference proxy, TTFT, throughput, CPU) and the
  throughput chart. Where an arm carries ``added_latency_ci_ms`` each difference shows its interval and
  what it says (noise when it holds 0, unreliable with too few samples); the §15.4 badge is the
  measurement's own decision (``over_bound``), else the upper ends of the intervals.

Charts draw intervals as error bars and never a bare point whose interval holds 0 (:mod:`reports.svg`); one
unit per chart. Missing parts are shown as missing, never invented; a present part of the wrong type is a
``report_input_invalid`` error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from harness.errors import HitchError
from reports.figures import PERCENTILES, ms, number, point
from reports.svg import bar_chart

__all__ = ["KINDS", "overhead_bound_ms", "overhead_section"]

KINDS = ("unary", "stream")
# spec §15.4: added p50/p95 must stay within max(20 ms, 5 % of the direct latency).
BOUND_FLOOR_MS, BOUND_FRACTION = 20.0, 0.05


def overhead_bound_ms(direct_p50_ms: float | None) -> float:
    return max(BOUND_FLOOR_MS, BOUND_FRACTION * direct_p50_ms) if direct_p50_ms else BOUND_FLOOR_MS


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _decided(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Rows and charts of the signed overhead figures."""
    headline = _mapping(metrics.get("gateway_added_latency_ms"))
    difference = _mapping(metrics.get("gateway_latency_difference_ms"))
    charts: list[Markup] = []
    if not all(isinstance(headline.get(k), Mapping) for k in KINDS):
        legacy = {p: number(headline.get(p)) for p in PERCENTILES} if headline else None
        return {
            "decided": None,
            "difference": [],
            "legacy_difference": legacy,
            "decided_charts": charts,
            "overhead_verdict": None,
        }
    decided = []
    for kind in KINDS:
        k = headline[kind]
        paired = _mapping(k.get("paired_shift_ms"))
        decided.append(
            {
                "kind": kind,
                "residence": {p: ms(_mapping(k.get("residence_ms")).get(p)) for p in PERCENTILES},
                "paired": ms(paired, signed=True),
                "target": number(paired.get("target_ms")),
                "paired_verdict": paired.get("verdict"),
                "bound": {p: number(v) for p, v in _mapping(k.get("bound_ms")).items()},
                "verdict": k.get("verdict"),
                "over": [str(o) for o in k.get("over") or []],
            }
        )
    residence = {kind: [point(_mapping(headline[kind].get("residence_ms")).get(p)) for p in PERCENTILES] for kind in KINDS}
    charts.append(
        bar_chart("overhead-residence", "Time in the gateway per request (c=1)", list(PERCENTILES), residence, unit="ms")
    )
    shifts = {"paired shift": [point(headline[kind].get("paired_shift_ms")) for kind in KINDS]}
    targets = {number(_mapping(headline[kind].get("paired_shift_ms")).get("target_ms")) for kind in KINDS}
    ref = [(f"1 % target {t:.2f} ms", t) for t in targets if t is not None] if len(targets) == 1 else []
    charts.append(
        bar_chart(
            "overhead-paired", "Paired shift of the typical request (gateway - direct beside it)", list(KINDS), shifts,
            unit="ms", ref_lines=ref,
        )
    )  # fmt: skip
    rows = []
    if all(isinstance(difference.get(k), Mapping) for k in KINDS):
        for kind in KINDS:
            cells = {p: _mapping(difference[kind].get(p)) for p in PERCENTILES}
            rows.append({"kind": kind, **{p: ms(c, signed=True) for p, c in cells.items()}, "notes": _notes(cells)})
        series = {kind: [point(_mapping(difference[kind]).get(p)) for p in PERCENTILES] for kind in KINDS}
        charts.append(
            bar_chart(
                "overhead-difference", "Black-box difference of E2E percentiles (gateway - direct)", list(PERCENTILES),
                series, unit="ms",
            )
        )  # fmt: skip
    return {
        "decided": decided,
        "difference": rows,
        "legacy_difference": None,
        "decided_charts": charts,
        "overhead_verdict": headline.get("verdict"),
    }


def _notes(cells: Mapping[str, Mapping[str, Any]]) -> str:
    noisy = [p for p, c in cells.items() if _holds_zero(c)]
    thin = [p for p, c in cells.items() if c.get("reliable") is False]
    notes = []
    if noisy:
        notes.append(f"{', '.join(noisy)}: the interval holds 0 — noise, not a figure (a negative one is no speed-up)")
    if thin:
        notes.append(f"{', '.join(thin)}: too few samples for this percentile")
    return "; ".join(notes)


def _holds_zero(c: Mapping[str, Any]) -> bool:
    low, high = number(c.get("low")), number(c.get("high"))
    return low is not None and high is not None and low <= 0 <= high


def _arm(section: Mapping[str, Any], arm: str, field: str) -> Mapping[str, Any]:
    return _mapping(_mapping(section.get(arm)).get(field))


def _interval_cells(ci: Any) -> dict[str, Any]:
    """Per percentile: the interval and what it says about the figure (None when the JSON has none)."""
    cells: dict[str, Any] = {}
    for p in PERCENTILES:
        entry = ci.get(p) if isinstance(ci, Mapping) else None
        if not isinstance(entry, Mapping):
            cells[f"ci_{p}"] = None
            continue
        low, high, estimate = number(entry.get("low")), number(entry.get("high")), number(entry.get("estimate"))
        notes = []
        if low is not None and high is not None and low <= 0 <= high:
            negative = estimate is not None and estimate < 0
            notes.append("negative: noise, not a speed-up" if negative else "noise (interval holds 0)")
        if entry.get("reliable") is False:
            notes.append(f"unreliable: n={entry.get('n')} per arm")
        cells[f"ci_{p}"] = {"low": low, "high": high, "n": entry.get("n"), "note": "; ".join(notes)}
    return cells


def _bound_values(row: Mapping[str, Any]) -> list[float | None]:
    """The p50/p95 figures the §15.4 line applies to in an older JSON: the upper end of each interval when the
    figures carry one, else the point figures."""
    return [row[f"ci_{p}"]["high"] if row.get(f"ci_{p}") else row.get(f"added_{p}") for p in ("p50", "p95")]


def _arm_row(kind: str, arm: str, section: Mapping[str, Any], bound: float) -> dict[str, Any]:
    entry = _mapping(section.get(arm))
    row: dict[str, Any] = {"kind": kind, "arm": arm, "rps_c32": number(entry.get("rps_c32"))}
    if arm == "direct":
        row["direct_p50_ms"] = number(entry.get("p50_ms"))
        return row
    a, t = _arm(section, arm, "added_latency_ms"), _arm(section, arm, "ttft_added_ms")
    row |= {f"added_{p}": number(a.get(p)) for p in PERCENTILES}
    row |= {f"ttft_{p}": number(t.get(p)) for p in PERCENTILES}
    row |= _interval_cells(entry.get("added_latency_ci_ms"))
    row["ratio_vs_direct"] = number(entry.get("throughput_ratio_vs_direct_c32"))
    row["cpu_ms_c32"] = number(entry.get("cpu_ms_per_request_c32"))
    decided = entry.get("over_bound")  # the measurement's own decision (certify.perf.summary)
    if isinstance(decided, list):
        row["within_bound"] = not decided
    else:  # an older JSON: the upper ends of the added intervals
        row["within_bound"] = all(v is not None and v <= bound for v in _bound_values(row))
    paired, target = entry.get("added_paired_ms"), entry.get("paired_target")
    row["paired"] = (
        {k: number(paired.get(k)) for k in ("estimate", "low", "high")}
        | {"n": paired.get("n"), "verdict": target.get("verdict") if isinstance(target, Mapping) else None}
        if isinstance(paired, Mapping)
        else None
    )
    resid = entry.get("residence_ci_ms")
    row["residence"] = (
        {p: number(_mapping(resid.get(p)).get("estimate")) for p in PERCENTILES} if isinstance(resid, Mapping) else None
    )
    return row


def _per_arm(overhead: Any) -> dict[str, Any]:
    """The per-arm table, the throughput chart and the run's facts from the certify.perf JSON."""
    if overhead is None:
        return {"overhead_rows": [], "arm_charts": [], "overhead_facts": {}}
    if not isinstance(overhead, Mapping) or not isinstance(overhead.get("results"), Mapping):
        raise HitchError(
            "report_input_invalid", "results.overhead must be the JSON written by certify.perf (with a 'results' object)", {}
        )
    res = overhead["results"]
    rows: list[dict[str, Any]] = []
    rps: dict[str, list[float | None]] = {"direct": [], "gateway": [], "reference": []}
    kinds = [k for k in KINDS if isinstance(res.get(k), Mapping)]
    for kind in kinds:
        section = res[kind]
        bound = overhead_bound_ms(number(_mapping(section.get("direct")).get("p50_ms")))
        for arm in ("direct", "gateway", "reference"):
            rps[arm].append(number(_mapping(section.get(arm)).get("rps_c32")))
            rows.append(_arm_row(kind, arm, section, bound))
    charts = (
        [bar_chart("overhead-throughput-c32", "Throughput at concurrency 32", kinds, rps, unit="requests/s")] if kinds else []
    )
    facts = {k: overhead.get(k) for k in ("engine", "rounds", "requests_c1", "seconds_c32", "capture") if k in overhead}
    rss = number(res.get("gateway_rss_bytes_per_open_stream"))
    if rss is not None:
        facts["gateway KiB per open stream"] = round(rss / 1024, 1)
    return {"overhead_rows": rows, "arm_charts": charts, "overhead_facts": facts}


def overhead_section(results: Mapping[str, Any]) -> dict[str, Any]:
    """The page's overhead context: ``decided`` (rows), ``difference`` (rows), ``legacy_difference``,
    ``decided_charts``, ``overhead_verdict``, ``overhead_rows``, ``arm_charts``, ``overhead_facts``."""
    metrics = _mapping(results.get("metrics"))
    return _decided(metrics) | _per_arm(results.get("overhead"))
