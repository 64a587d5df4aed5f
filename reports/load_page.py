"""The load page: gateway vs direct from locust's CSV output, side by side, with time series.

Reads a directory holding ``gateway_stats.csv`` / ``direct_stats.csv`` (locust ``--csv`` prefix files,
``Type,Name,Request Count,...,50%,...``) and optionally ``*_stats_history.csv`` and ``summary.json``. One
target alone is accepted; neither is an error. Streaming metrics reported to locust as their own entries
(a name or type mentioning TTFT or inter-token latency) are shown apart from the HTTP request figures.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from harness.errors import HitchError
from reports.render import flatten, write_page
from reports.svg import line_chart

__all__ = ["TARGETS", "build_load_page", "read_stats"]

TARGETS = ("gateway", "direct")
STREAM_METRIC = re.compile(r"ttft|time.to.first|inter.?token|\bitl\b", re.IGNORECASE)
FIGURES = (
    ("requests", "Request Count", "{:.0f}"),
    ("failures", "Failure Count", "{:.0f}"),
    ("req/s", "Requests/s", "{:.2f}"),
    ("failures/s", "Failures/s", "{:.2f}"),
    ("avg ms", "Average Response Time", "{:.1f}"),
    ("p50 ms", "50%", "{:.0f}"),
    ("p95 ms", "95%", "{:.0f}"),
    ("p99 ms", "99%", "{:.0f}"),
    ("max ms", "Max Response Time", "{:.0f}"),
)


def _invalid(message: str, **details: Any) -> HitchError:
    return HitchError("report_input_invalid", message, details)


def _read_csv(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, na_values=["N/A"], keep_default_na=True, dtype={"Type": str, "Name": str})
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise _invalid(f"cannot read locust CSV {path.name}: {exc}", path=str(path)) from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise _invalid(f"{path.name} is not a locust stats CSV (missing {', '.join(missing)})", path=str(path))
    df["Type"] = df["Type"].fillna("")
    df["Name"] = df["Name"].fillna("")
    return df


def read_stats(path: Path) -> tuple[dict[str, float | None], pd.DataFrame]:
    """(HTTP request figures, streaming-metric rows) from one ``*_stats.csv``."""
    df = _read_csv(path, ("Type", "Name", "Request Count", "Failure Count", "Requests/s"))
    is_metric = df["Name"].str.contains(STREAM_METRIC) | df["Type"].str.contains(STREAM_METRIC)
    is_total = df["Name"] == "Aggregated"
    requests = df[~is_metric & ~is_total]
    # The Aggregated row mixes custom metrics into the request figures; use it only when it is all there is.
    pick = requests.iloc[0] if len(requests) == 1 else (df[is_total].iloc[0] if is_total.any() else None)
    figures: dict[str, float | None] = {}
    for label, column, _ in FIGURES:
        value = pick.get(column) if pick is not None else None
        figures[label] = None if value is None or pd.isna(value) else float(value)
    return figures, df[is_metric]


def _history(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    df = _read_csv(path, ("Timestamp", "User Count", "Name", "Requests/s"))
    df = df[df["Name"] == "Aggregated"].copy()
    if df.empty:
        return None
    df["t"] = df["Timestamp"] - df["Timestamp"].min()
    return df


def _series(histories: dict[str, pd.DataFrame], column: str) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for target, df in histories.items():
        if column in df.columns:
            sub = df[["t", column]].dropna()
            out[target] = [(float(t), float(v)) for t, v in zip(sub["t"], sub[column], strict=True)]
    return out


def _charts(histories: dict[str, pd.DataFrame]) -> list[Markup]:
    if not histories:
        return []
    charts = [
        line_chart("load-rps", "Requests/s over time", _series(histories, "Requests/s"), x_label="seconds", unit="req/s"),
        line_chart("load-users", "Users over time", _series(histories, "User Count"), x_label="seconds", unit="users"),
    ]
    for column in ("50%", "95%"):
        label = f"p{column.rstrip('%')}"
        charts.append(
            line_chart(
                f"load-{label}",
                f"{label} response time over time",
                _series(histories, column),
                x_label="seconds",
                unit="ms",
            )
        )
    failures = _series(histories, "Failures/s")
    if any(v for pts in failures.values() for _, v in pts):
        charts.append(line_chart("load-failures", "Failures/s over time", failures, x_label="seconds", unit="failures/s"))
    return charts


def _side_by_side(figures: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    rows = []
    for label, _, fmt in FIGURES:
        cells = {t: (fmt.format(v) if (v := figures[t][label]) is not None else "—") for t in figures}
        g, d = figures.get("gateway", {}).get(label), figures.get("direct", {}).get(label)
        ratio = f"{g / d:.2f}" if g is not None and d else "—"
        rows.append({"figure": label, "cells": cells, "ratio": ratio})
    return rows


def _metric_rows(target: str, df: pd.DataFrame) -> list[dict[str, Any]]:
    cols = ["Request Count", "Average Response Time", "50%", "95%", "99%", "Max Response Time"]
    rows = []
    for rec in df.to_dict("records"):
        values = {c: (None if c not in rec or pd.isna(rec[c]) else float(rec[c])) for c in cols}
        rows.append({"target": target, "type": rec["Type"], "name": rec["Name"], **values})
    return rows


def build_load_page(load_dir: Path, out_dir: Path, *, name: str = "load.html") -> Path:
    """Write ``out_dir/name`` from a locust CSV directory; returns its path."""
    load_dir = Path(load_dir)
    if not load_dir.is_dir():
        raise _invalid(f"load directory {load_dir} does not exist", path=str(load_dir))
    present = [t for t in TARGETS if (load_dir / f"{t}_stats.csv").is_file()]
    if not present:
        raise _invalid(f"{load_dir} holds neither gateway_stats.csv nor direct_stats.csv", path=str(load_dir))
    figures: dict[str, dict[str, float | None]] = {}
    metric_rows: list[dict[str, Any]] = []
    histories: dict[str, pd.DataFrame] = {}
    for target in present:
        figures[target], metrics = read_stats(load_dir / f"{target}_stats.csv")
        metric_rows.extend(_metric_rows(target, metrics))
        history = _history(load_dir / f"{target}_stats_history.csv")
        if history is not None:
            histories[target] = history
    summary: list[tuple[str, Any]] = []
    summary_path = load_dir / "summary.json"
    if summary_path.is_file():
        try:
            data = json.loads(summary_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _invalid(f"summary.json is not JSON: {exc}", path=str(summary_path)) from exc
        summary = flatten(data)
    return write_page(
        Path(out_dir),
        name,
        "load.html.j2",
        targets=present,
        side_by_side=_side_by_side(figures),
        metric_rows=metric_rows,
        charts=_charts(histories),
        summary=summary,
        load_dir=str(load_dir),
    )
