"""Inline SVG charts for the report pages: grouped bars, line series and a timeline of lanes, nothing else.

Every chart is a self-contained ``<svg>`` element (no scripts, no external fonts or styles) returned as
:class:`markupsafe.Markup` so the autoescaping templates embed it as-is; every label that reaches the markup
is escaped here. Each chart carries ``class="chart"``, ``data-chart=<name>`` and ``data-unit=<unit>`` so
tests can find it in a DOM.

One unit per chart: the caller names it (``unit=``), the y axis says it, and every bar carries it
(``data-unit``). Every chart has a text alternative: ``aria-label`` (the title and the unit) and a
``<desc>`` that states each plotted value in words, intervals included.

A bar's value may be a :class:`Point` with its 95 % interval: the interval is drawn as an error bar, and a
point whose interval holds 0 is drawn as the interval alone with a hollow marker (``class="noise"``) —
never as a bar, which would present noise as a figure.

The timeline (:func:`timeline_chart`) draws one lane per process, each with a row of fixture bars above a row
of check bars on one time axis (seconds from the session's start), coloured by the engine the bar used; its
``<desc>`` says per lane how many checks and fixtures ran, for how long, and when the lane finished.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

__all__ = ["LaneBar", "Point", "bar_chart", "line_chart", "timeline_chart"]


@dataclass(frozen=True)
class Point:
    """A plotted figure with its 95 % interval (``low``/``high`` None: no interval)."""

    value: float
    low: float | None = None
    high: float | None = None

    @property
    def noise(self) -> bool:
        """The interval holds 0: the figure is not told apart from nothing."""
        return self.low is not None and self.high is not None and self.low <= 0 <= self.high


WIDTH, HEIGHT = 520, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 34, 58
PALETTE = {"direct": "#4e79a7", "gateway": "#e15759", "reference": "#59a14f"}
FALLBACK = ("#f28e2b", "#76b7b2", "#edc948", "#b07aa1", "#9c755f", "#bab0ac")


def _color(name: str, index: int) -> str:
    return PALETTE.get(name, FALLBACK[index % len(FALLBACK)])


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out, t = [], start
    while t <= hi + step * 1e-9:
        out.append(round(t, 10))
        t += step
    return out


def _range(values: Sequence[float], refs: Sequence[float]) -> tuple[float, float]:
    lo = min([0.0, *values, *refs])
    hi = max([0.0, *values, *refs])
    if hi == lo:
        hi = lo + 1.0
    pad = (hi - lo) * 0.08
    return (lo - pad if lo < 0 else lo), hi + pad


def _frame(name: str, title: str, y_label: str, lo: float, hi: float, unit: str, desc: str) -> tuple[list[str], float, float]:
    """Opening tag, title, text alternative, axes and grid; returns parts plus the plot's pixel height and scale."""
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" data-chart="{escape(name)}" data-unit="{escape(unit)}" role="img" '
        f'aria-label="{escape(f"{title} ({unit})")}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f"<desc>{escape(desc)}</desc>",
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<text x="14" y="{TOP + plot_h / 2}" transform="rotate(-90 14 {TOP + plot_h / 2})" '
        f'text-anchor="middle">{escape(y_label)}</text>',
    ]
    ticks = _ticks(lo, hi)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 0
    for t in ticks:
        y = TOP + plot_h * (hi - t) / (hi - lo)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{t:.{decimals}f}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#333"/>')
    return parts, plot_h, float(plot_h) / (hi - lo)


def _legend(names: Sequence[str], y: float) -> list[str]:
    parts, x = [], float(LEFT)
    for i, name in enumerate(names):
        parts.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" fill="{_color(name, i)}"/>')
        parts.append(f'<text x="{x + 14:.1f}" y="{y:.1f}">{escape(name)}</text>')
        x += 24 + 7 * len(name)
    return parts


def _as_point(v: float | Point | None) -> Point | None:
    if v is None:
        return None
    p = v if isinstance(v, Point) else Point(float(v))
    return p if _finite(p.value) else None


def _point_words(p: Point, unit: str) -> str:
    text = f"{_fmt(p.value)} {unit}"
    if p.low is not None and p.high is not None:
        text += f" (95 % interval {_fmt(p.low)} to {_fmt(p.high)}{', holds 0: noise' if p.noise else ''})"
    return text


def bar_chart(
    name: str,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | Point | None]],
    *,
    unit: str,
    y_label: str | None = None,
    ref_lines: Sequence[tuple[str, float]] = (),
) -> Markup:
    """Grouped bars in ``unit``: one group per entry of ``groups``, one bar per series; ``None``/NaN bars are
    left out; a :class:`Point` with an interval gets an error bar, and one whose interval holds 0 no bar."""
    points = {k: [_as_point(v) for v in vs] for k, vs in series.items()}
    values = [x for ps in points.values() for p in ps if p is not None for x in (p.value, p.low, p.high) if x is not None]
    refs = [v for _, v in ref_lines if _finite(v)]
    lo, hi = _range(values, refs)
    words = [
        f"{sname} {group}: {_point_words(p, unit)}"
        for sname, ps in points.items()
        for group, p in zip(groups, ps, strict=False)
        if p is not None
    ]
    words += [f"{label}: {_fmt(v)} {unit}" for label, v in ref_lines if _finite(v)]
    parts, plot_h, scale = _frame(name, title, y_label or unit, lo, hi, unit, f"{title}. " + "; ".join(words or ["no data"]))
    base_y = TOP + (hi - 0.0) * scale
    names = list(points)
    group_w = (WIDTH - LEFT - RIGHT) / max(len(groups), 1)
    bar_w = group_w * 0.8 / max(len(names), 1)
    for g, group in enumerate(groups):
        gx = LEFT + g * group_w + group_w * 0.1
        for s, sname in enumerate(names):
            ps = points[sname]
            p = ps[g] if g < len(ps) else None
            if p is None:
                continue
            x = gx + s * bar_w
            cx = x + bar_w * 0.46
            color = _color(sname, s)
            tip = f"<title>{escape(f'{sname} {group}: {_point_words(p, unit)}')}</title>"
            attrs = f'data-series="{escape(sname)}" data-group="{escape(group)}" data-unit="{escape(unit)}"'
            v = p.value
            label_y = TOP + (hi - v) * scale - 5
            if p.noise:
                parts.append(
                    f'<circle class="noise" {attrs} cx="{cx:.1f}" cy="{TOP + (hi - v) * scale:.1f}" r="4" fill="#fff" '
                    f'stroke="{color}" stroke-width="2">{tip}</circle>'
                )
                label = _fmt(v)
            else:
                y_top = TOP + (hi - max(v, 0.0)) * scale
                h = abs(v) * scale
                parts.append(
                    f'<rect class="bar" {attrs} x="{x:.1f}" y="{y_top:.1f}" width="{bar_w * 0.92:.1f}" '
                    f'height="{max(h, 0.5):.1f}" fill="{color}">{tip}</rect>'
                )
                label = _fmt(v)
                label_y = y_top - 3 if v >= 0 else y_top + h + 11
            if p.low is not None and p.high is not None and _finite(p.low) and _finite(p.high):
                y_lo, y_hi = TOP + (hi - p.low) * scale, TOP + (hi - p.high) * scale
                parts.append(
                    f'<path class="err" {attrs} d="M{cx:.1f},{y_lo:.1f}V{y_hi:.1f}M{cx - 5:.1f},{y_lo:.1f}H{cx + 5:.1f}'
                    f'M{cx - 5:.1f},{y_hi:.1f}H{cx + 5:.1f}" stroke="#222" stroke-width="1.2" fill="none"/>'
                )
                label_y = min(label_y, y_hi - 4)
            parts.append(f'<text x="{cx:.1f}" y="{label_y:.1f}" text-anchor="middle">{escape(label)}</text>')
        parts.append(
            f'<text x="{LEFT + (g + 0.5) * group_w:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{escape(group)}</text>'
        )
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{base_y:.1f}" y2="{base_y:.1f}" stroke="#333"/>')
    for label, v in ref_lines:
        if not _finite(v):
            continue
        y = TOP + (hi - v) * scale
        parts.append(
            f'<line class="ref" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#000" stroke-dasharray="6 4"/>'
        )
        parts.append(f'<text x="{WIDTH - RIGHT - 4}" y="{y - 4:.1f}" text-anchor="end">{escape(label)}</text>')
    parts.extend(_legend(names, HEIGHT - 12))
    if any(p is not None and p.noise for ps in points.values() for p in ps):
        x = WIDTH - RIGHT - 190
        parts.append(f'<circle cx="{x:.1f}" cy="{HEIGHT - 16}" r="4" fill="#fff" stroke="#555" stroke-width="2"/>')
        parts.append(f'<text x="{x + 8:.1f}" y="{HEIGHT - 12}">interval holds 0: noise, no bar</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def line_chart(
    name: str,
    title: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    x_label: str,
    unit: str,
    y_label: str | None = None,
    x_ticks: Sequence[tuple[float, str]] | None = None,
) -> Markup:
    """One polyline (with point markers) per series of ``(x, y)`` points, y in ``unit``; non-finite points are dropped."""
    clean = {k: [(x, y) for x, y in pts if math.isfinite(x) and math.isfinite(y)] for k, pts in series.items()}
    xs = [x for pts in clean.values() for x, _ in pts]
    ys = [y for pts in clean.values() for _, y in pts]
    lo, hi = _range(ys, [])
    words = [
        f"{sname}: {len(pts)} points over {x_label} {_fmt(pts[0][0])} to {_fmt(pts[-1][0])}, {unit} from "
        f"{_fmt(min(y for _, y in pts))} to {_fmt(max(y for _, y in pts))}, last {_fmt(pts[-1][1])}"
        for sname, pts in clean.items()
        if pts
    ]
    desc = f"{title}. " + "; ".join(words or ["no data"])
    parts, plot_h, scale = _frame(name, title, y_label or unit, lo, hi, unit, desc)
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    plot_w = WIDTH - LEFT - RIGHT - 12

    def px(x: float) -> float:
        return LEFT + 6 + plot_w * (x - x0) / (x1 - x0)

    ticks = list(x_ticks) if x_ticks is not None else [(t, _fmt(t)) for t in _ticks(x0, x1)]
    for t, label in ticks:
        parts.append(f'<text x="{px(t):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{escape(label)}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" stroke="#333"/>')
    parts.append(f'<text x="{WIDTH / 2}" y="{TOP + plot_h + 32}" text-anchor="middle">{escape(x_label)}</text>')
    for i, (sname, pts) in enumerate(clean.items()):
        if not pts:
            continue
        color = _color(sname, i)
        coords = " ".join(f"{px(x):.1f},{TOP + (hi - y) * scale:.1f}" for x, y in pts)
        parts.append(
            f'<polyline class="series" data-series="{escape(sname)}" fill="none" stroke="{color}" '
            f'stroke-width="2" points="{coords}"/>'
        )
        if len(pts) <= 40:
            for x, y in pts:
                parts.append(f'<circle cx="{px(x):.1f}" cy="{TOP + (hi - y) * scale:.1f}" r="3" fill="{color}"/>')
    parts.extend(_legend(list(clean), HEIGHT - 8))
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True)
class LaneBar:
    """One bar of a timeline: its lane, its row (``fixtures`` or ``checks``), where it starts and ends in the
    chart's unit, its colour's series, its label, and whether it lies inside another bar (drawn thinner on it)."""

    lane: str
    row: str
    start: float
    end: float
    series: str
    label: str
    inner: bool = False


TIMELINE_WIDTH, LANE_H, ROW_H = 760, 34, 13
TIMELINE_SERIES = ("session", "private", "none", "unattributed")
TIMELINE_COLORS = {"session": "#4e79a7", "private": "#e15759", "none": "#59a14f", "unattributed": "#bab0ac"}


def timeline_chart(name: str, title: str, lanes: Sequence[str], bars: Sequence[LaneBar], *, unit: str, span: float) -> Markup:
    """Lanes over one time axis from 0 to ``span`` (``unit``): per lane a fixtures row above a checks row."""
    span = span if _finite(span) and span > 0 else max([1.0, *(b.end for b in bars if _finite(b.end))])
    height = TOP + LANE_H * max(len(lanes), 1) + 50
    plot_w = TIMELINE_WIDTH - LEFT - RIGHT

    def px(t: float) -> float:
        return LEFT + plot_w * min(max(t, 0.0), span) / span

    words = []
    for lane in lanes:
        mine = [b for b in bars if b.lane == lane and not b.inner]
        checks = [b for b in mine if b.row == "checks"]
        fixtures = [b for b in mine if b.row != "checks"]
        last = max((b.end for b in mine), default=0.0)
        words.append(
            f"{lane}: {len(checks)} checks over {_fmt(sum(b.end - b.start for b in checks))} {unit}, {len(fixtures)} "
            f"fixture spans over {_fmt(sum(b.end - b.start for b in fixtures))} {unit}, last ends at {_fmt(last)} {unit}"
        )
    desc = f"{title}. " + "; ".join(words or ["no data"])
    parts = [
        f'<svg class="chart" data-chart="{escape(name)}" data-unit="{escape(unit)}" role="img" '
        f'aria-label="{escape(f"{title} ({unit})")}" viewBox="0 0 {TIMELINE_WIDTH} {height}" width="{TIMELINE_WIDTH}" '
        f'height="{height}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f"<desc>{escape(desc)}</desc>",
        f'<text x="{TIMELINE_WIDTH / 2}" y="18" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    bottom = TOP + LANE_H * max(len(lanes), 1)
    for t in _ticks(0.0, span):
        parts.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{TOP}" y2="{bottom}" stroke="#ddd"/>')
        parts.append(f'<text x="{px(t):.1f}" y="{bottom + 14}" text-anchor="middle">{t:g}</text>')
    axis = escape(f"time since the session started ({unit})")
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{bottom + 28}" text-anchor="middle">{axis}</text>')
    for i, lane in enumerate(lanes):
        y = TOP + i * LANE_H
        parts.append(f'<text x="{LEFT - 6}" y="{y + ROW_H + 4}" text-anchor="end">{escape(lane)}</text>')
        rule = y + LANE_H - 2
        parts.append(f'<line x1="{LEFT}" x2="{TIMELINE_WIDTH - RIGHT}" y1="{rule}" y2="{rule}" stroke="#eee"/>')
        for bar in (b for b in bars if b.lane == lane):
            top = y + (ROW_H if bar.row == "checks" else 0) + (ROW_H / 4 if bar.inner else 0)
            h = ROW_H / 2 if bar.inner else ROW_H - 1
            color = TIMELINE_COLORS.get(bar.series, TIMELINE_COLORS["unattributed"])
            outline = ' stroke="#222" stroke-width="0.5"' if bar.inner else ""
            width = max(px(bar.end) - px(bar.start), 0.6)
            tip = f"<title>{escape(f'{bar.label}: {_fmt(bar.end - bar.start)} {unit} from {_fmt(bar.start)} {unit}')}</title>"
            parts.append(
                f'<rect class="span" data-lane="{escape(lane)}" data-row="{escape(bar.row)}" data-series="{escape(bar.series)}" '
                f'data-unit="{escape(unit)}" x="{px(bar.start):.1f}" y="{top:.1f}" width="{width:.1f}" '
                f'height="{h:.1f}" fill="{color}"{outline}>{tip}</rect>'
            )
    x = float(LEFT)
    for series in TIMELINE_SERIES:
        parts.append(f'<rect x="{x:.1f}" y="{height - 17:.1f}" width="10" height="10" fill="{TIMELINE_COLORS[series]}"/>')
        parts.append(f'<text x="{x + 14:.1f}" y="{height - 8:.1f}">{escape(series)}</text>')
        x += 24 + 7 * len(series)
    key = "each lane: fixtures above, checks below"
    parts.append(f'<text x="{TIMELINE_WIDTH - RIGHT}" y="{height - 8:.1f}" text-anchor="end">{key}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
