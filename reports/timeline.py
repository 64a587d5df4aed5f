"""The run page's timeline section: what ran when, in which process, on which engine, and what set the wall time.

Input is ``results.json``'s ``timeline`` (:class:`~harness.contracts.timeline.CertificationTimelineV1`);
a session written before it was measured has none and the page says so. The section holds the chart
(:func:`reports.svg.timeline_chart`: one lane per process, fixtures above checks, coloured by engine), one row
per lane (its checks' and fixtures' time, when it finished), the CPU over the session, and the critical path.

The critical path (:func:`critical_path`) is computed from the spans alone, by this rule:

1. Only *outer* spans count: a span lying inside another span of the same process (a step inside the fixture
   that ran it) is part of that span.
2. The chain ends with the outer span that ended last (the lane that finished last; on a tie the longer span).
3. Each span's predecessor is the outer span, in any process, that ended last at or before it started (on a tie:
   the same process first, then the longer span): what it waited on. The time between the two (``gap``) is
   pytest's own work, a process starting, or a wait nothing recorded. A ``wait`` span (a worker waiting for its
   turn on the session engine) waited on whatever released it: its predecessor is the span of another process
   that ended last at or before the wait ended, and only the wait's time after that span's end is its own.
4. The chain starts with the span that has no predecessor; the time from the session's start to it is the
   session's start-up (collection, workers starting).

The chain's spans plus its gaps add up to the session's wall time minus whatever ran after the last span
(writing the outputs is not in the timeline). The page lists the chain's longest spans; the rest are summed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from harness.contracts.timeline import CertificationTimelineV1, TimelineSpanV1
from harness.errors import HitchError
from reports.figures import duration_words
from reports.svg import LaneBar, timeline_chart

__all__ = ["PathStep", "critical_path", "load_timeline", "timeline_section", "timeline_summary"]

PATH_ROWS = 12  # the critical path's longest spans the page lists; the rest are summed in one line
TIE_S = 1e-6


@dataclass(frozen=True)
class PathStep:
    """One span of the critical path and the time between its predecessor's end and its start."""

    span: TimelineSpanV1
    gap_s: float
    own_s: float  # the span's share of the chain: its duration (a wait: only its time after its predecessor ended)


def load_timeline(results: Mapping[str, Any]) -> CertificationTimelineV1 | None:
    """The results' timeline, None when the session recorded none; a malformed one is ``report_input_invalid``."""
    raw = results.get("timeline")
    if raw is None:
        return None
    try:
        return CertificationTimelineV1.model_validate(raw)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        message = "results.timeline is not a certification timeline"
        raise HitchError("report_input_invalid", message, {"error": str(exc)[:500]}) from exc


def _outer(spans: Sequence[TimelineSpanV1]) -> list[TimelineSpanV1]:
    """The spans no other span of the same process holds (rule 1)."""
    by_pid: dict[int, list[TimelineSpanV1]] = {}
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        by_pid.setdefault(s.pid, []).append(s)
    out: list[TimelineSpanV1] = []
    for rows in by_pid.values():
        reach = float("-inf")
        for s in rows:  # by start, longest first: one ending within the reach so far lies inside the span that set it
            if s.end <= reach:
                continue
            out.append(s)
            reach = max(reach, s.end)
    return sorted(out, key=lambda s: (s.start, -s.end))


def critical_path(spans: Sequence[TimelineSpanV1], started_at: float) -> list[PathStep]:
    """The chain of spans that set the session's wall time, first to last (see the module docstring's rule)."""
    outer = _outer(spans)
    if not outer:
        return []
    last = max(outer, key=lambda s: (s.end, s.duration_s))
    chain = [last]
    seen = {id(last)}
    while True:
        current = chain[-1]
        found = _predecessor(outer, current, seen)
        if found is None:
            break
        chain.append(found)
        seen.add(id(found))
    chain.reverse()
    steps = [PathStep(chain[0], max(0.0, chain[0].start - started_at), chain[0].duration_s)]
    for prev, s in itertools.pairwise(chain):
        if s.kind == "wait" and prev.end > s.start:
            steps.append(PathStep(s, 0.0, max(0.0, s.end - prev.end)))  # released by ``prev``: waited until it ended
        else:
            steps.append(PathStep(s, max(0.0, s.start - prev.end), s.duration_s))
    return steps


def _predecessor(outer: Sequence[TimelineSpanV1], current: TimelineSpanV1, seen: set[int]) -> TimelineSpanV1 | None:
    """What ``current`` waited on (rule 3); None when nothing ended before it."""

    def latest(rows: list[TimelineSpanV1]) -> TimelineSpanV1 | None:
        return max(rows, key=lambda s: (s.end, s.worker == current.worker, s.duration_s)) if rows else None

    if current.kind == "wait":
        released = latest([s for s in outer if s.worker != current.worker and id(s) not in seen and s.end <= current.end + TIE_S])
        if released is not None and released.end > current.start:
            return released
    return latest([s for s in outer if id(s) not in seen and s.end <= current.start + TIE_S])


def _label(s: TimelineSpanV1) -> str:
    if s.kind == "check":
        return s.name
    what = f"{s.name} ({s.phase})" if s.kind == "fixture" else s.name
    return f"{what} for {s.check}" if s.check and s.check != s.name else what


def _lanes(timeline: CertificationTimelineV1, outer: Sequence[TimelineSpanV1]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for s in outer:
        row = rows.setdefault(s.worker, {"lane": s.worker, "checks": 0, "check_s": 0.0, "fixture_s": 0.0, "end": s.end})
        if s.kind == "check":
            row["checks"] += 1
            row["check_s"] += s.duration_s
        else:
            row["fixture_s"] += s.duration_s
        row["end"] = max(row["end"], s.end)
    return [
        {
            "lane": r["lane"],
            "checks": r["checks"],
            "check_time": duration_words(r["check_s"] * 1000),
            "fixture_time": duration_words(r["fixture_s"] * 1000),
            "idle": duration_words(max(0.0, r["end"] - timeline.started_at - r["check_s"] - r["fixture_s"]) * 1000),
            "ended": duration_words((r["end"] - timeline.started_at) * 1000),
        }
        for r in sorted(rows.values(), key=lambda r: _lane_order(str(r["lane"])))
    ]


def _totals(timeline: CertificationTimelineV1) -> tuple[float, float]:
    """(sum of the checks' durations, sum of the outer fixture and step spans' durations), seconds."""
    outer = _outer(timeline.spans)
    return (
        sum(s.duration_s for s in outer if s.kind == "check"),
        sum(s.duration_s for s in outer if s.kind != "check"),
    )


def _lane_order(lane: str) -> tuple[int, str]:
    """Workers first in their number's order (gw2 before gw10), the controlling process (``main``) last."""
    digits = "".join(ch for ch in lane if ch.isdigit())
    return (int(digits) if digits and lane != "main" else 10**6, lane)


def _chart(timeline: CertificationTimelineV1, outer: Sequence[TimelineSpanV1]) -> Markup:
    kept = {id(s) for s in outer}
    bars = [
        LaneBar(
            lane=s.worker,
            row="checks" if s.kind == "check" else "fixtures",
            start=s.start - timeline.started_at,
            end=s.end - timeline.started_at,
            series=s.engine or "unattributed",
            label=f"{_label(s)} [{s.engine or 'no engine named'}]",
            inner=id(s) not in kept,
        )
        for s in timeline.spans
    ]
    lanes = sorted({s.worker for s in timeline.spans}, key=_lane_order)
    return timeline_chart("session-timeline", "Session timeline", lanes, bars, unit="s", span=timeline.wall_s)


def timeline_summary(timeline: CertificationTimelineV1) -> list[str]:
    """The timeline in a few lines for the terminal: wall time, sums, CPU, the critical path's longest spans."""
    checks_s, fixtures_s = _totals(timeline)
    cpu = f", CPU {timeline.cpu.utilisation * 100:.0f} % of {timeline.cpu.cores} cores" if timeline.cpu else ""
    lines = [f"timeline: wall {timeline.wall_s:.1f} s, checks {checks_s:.1f} s, fixtures {fixtures_s:.1f} s{cpu}"]
    if timeline.quiet:
        lines.append(_quiet_words(timeline))
    path = critical_path(timeline.spans, timeline.started_at)
    if path:
        busy, waited = sum(p.own_s for p in path), sum(p.gap_s for p in path)
        lines.append(f"critical path: {len(path)} spans, {busy:.1f} s busy, {waited:.1f} s between them")
        for p in sorted(path, key=lambda p: -p.own_s)[:5]:
            lines.append(f"  {p.span.worker} {p.span.kind} {_label(p.span)}: {p.own_s:.1f} s")
    return lines


def _quiet_words(timeline: CertificationTimelineV1) -> str:
    """One line on the quiet phases: how many, how long, how many were refused, the CPU outside them."""
    quiet = timeline.quiet
    took = sum(q.end - q.start for q in quiet)
    refused = sum(q.verdict == "refused" for q in quiet)
    outside = "" if timeline.cpu_outside_quiet is None else f"; CPU outside them {timeline.cpu_outside_quiet * 100:.0f} %"
    return f"quiet phases: {len(quiet)} ({took:.1f} s), {refused} refused for load{outside}"


def _quiet_rows(timeline: CertificationTimelineV1) -> list[dict[str, Any]]:
    def cores(v: float | None) -> str:
        return "not read" if v is None else f"{v:.2f}"

    return [
        {
            "what": q.name,
            "check": q.check or "",
            "lane": q.worker,
            "at": duration_words((q.start - timeline.started_at) * 1000),
            "took": duration_words((q.end - q.start) * 1000),
            "limit": "off" if q.limit_cores is None else f"{q.limit_cores:.2f} ({q.limit_setting})",
            "before": cores(q.before_cores),
            "after": cores(q.after_cores),
            "waited": duration_words(q.waited_s * 1000),
            "verdict": q.verdict,
            "reason": q.reason,
        }
        for q in timeline.quiet
    ]


def timeline_section(results: Mapping[str, Any]) -> dict[str, Any]:
    """The run page's ``timeline`` context: None without one, else its chart, lanes, CPU words and critical path."""
    timeline = load_timeline(results)
    if timeline is None:
        return {"timeline": None}
    outer = _outer(timeline.spans)
    path = critical_path(timeline.spans, timeline.started_at)
    longest = sorted(path, key=lambda p: -p.own_s)[:PATH_ROWS]
    shown = {id(p) for p in longest}
    rest = [p for p in path if id(p) not in shown]
    rows = [
        {
            "lane": p.span.worker,
            "kind": p.span.kind,
            "what": _label(p.span),
            "engine": p.span.engine or "",
            "at": duration_words((p.span.start - timeline.started_at) * 1000),
            "duration": duration_words(p.own_s * 1000)
            if p.own_s == p.span.duration_s
            else f"{duration_words(p.own_s * 1000)} of {duration_words(p.span.duration_s * 1000)}",
            "gap": duration_words(p.gap_s * 1000),
        }
        for p in path
        if id(p) in shown
    ]
    checks_s, fixtures_s = _totals(timeline)
    cpu = timeline.cpu
    chart = _chart(timeline, outer)
    return {
        "timeline": {
            "chart": chart,
            "wall": duration_words(timeline.wall_s * 1000),
            "check_time": duration_words(checks_s * 1000),
            "fixture_time": duration_words(fixtures_s * 1000),
            "cpu": None
            if cpu is None
            else f"{cpu.utilisation * 100:.0f} % of {cpu.cores} cores ({cpu.user_s:.0f} s user, {cpu.system_s:.0f} s system)",
            "lanes": _lanes(timeline, outer),
            "quiet": _quiet_rows(timeline),
            "quiet_words": _quiet_words(timeline) if timeline.quiet else None,
            "path": rows,
            "path_spans": len(path),
            "path_busy": duration_words(sum(p.own_s for p in path) * 1000),
            "path_gaps": duration_words(sum(p.gap_s for p in path) * 1000),
            "path_rest": None if not rest else f"{len(rest)} shorter spans: {duration_words(sum(p.own_s for p in rest) * 1000)}",
        }
    }
