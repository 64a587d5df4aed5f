"""The per-run page: checks, evidence (linked and previewed), hardware fingerprint, gateway-overhead plots, lifecycle timings.

Input is one run's ``results.json``: a DESIGN §6 predicate plus, optionally, ``overhead`` (the JSON that
``python -m certify.perf --out`` writes: ``results.{unary,stream}.{gateway,reference,direct}``) and
``lifecycle`` (a mapping of timing name to number, possibly nested). Where an arm carries
``added_latency_ci_ms`` (bootstrap 95 % intervals, :func:`harness.stats.added_intervals`) each added figure
shows its interval, the §15.4 badge is decided on the interval's upper end, and the page says when a figure is
noise (its interval holds 0: a negative one is no speed-up) or unreliable (too few samples); where it carries
``added_paired_ms`` (the median of per-pair differences, :mod:`certify.perf.summary`) that shift is shown with
its interval and its verdict against max(2 ms, 1 % of direct p50). Missing parts are
shown as missing, never invented; a present part of the wrong type is a ``report_input_invalid`` error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from harness.errors import HitchError
from reports.render import flatten, write_page
from reports.svg import bar_chart, line_chart

__all__ = ["SUITES", "build_run_page", "overhead_bound_ms"]

SUITES = ("hardware", "protocol", "correctness", "faults", "security", "lifecycle", "perf", "agents")
STATUSES = ("passed", "failed", "skipped", "not_run")
PERCENTILES = ("p50", "p95", "p99")
# spec §15.4: added p50/p95 must stay within max(20 ms, 5 % of the direct latency).
BOUND_FLOOR_MS, BOUND_FRACTION = 20.0, 0.05
# DESIGN §6 lifecycle lines: a cancelled request frees its slot within 5 s; idle stop within TTL + 10 s.
EVIDENCE_DIR = "evidence"  # the run's evidence store beside the page (catalog.evidence)
EVIDENCE_PREVIEW_BYTES = 2048
LIFECYCLE_BOUNDS = {"cancel_slot_free_ms": (5000.0, "ms"), "idle_stop_after_ttl_s": (10.0, "s")}

MODEL_FACTS = ("name", "architecture", "parameters", "license", "source")


def _invalid(message: str, **details: Any) -> HitchError:
    return HitchError("report_input_invalid", message, details)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def overhead_bound_ms(direct_p50_ms: float | None) -> float:
    return max(BOUND_FLOOR_MS, BOUND_FRACTION * direct_p50_ms) if direct_p50_ms else BOUND_FLOOR_MS


def _checks(results: Mapping[str, Any]) -> dict[str, Any]:
    """The page's ``checks`` (rows), ``summary`` (per-suite status counts) and ``blocking`` (ids of required
    checks that did not pass)."""
    raw = results.get("checks", [])
    if not isinstance(raw, list) or not all(isinstance(c, Mapping) and isinstance(c.get("id"), str) for c in raw):
        raise _invalid("results.checks must be a list of objects with a string id")
    if not raw:
        return {"checks": [], "summary": [], "blocking": []}
    df = pd.DataFrame(
        {
            "id": [c["id"] for c in raw],
            "status": [str(c.get("status", "not_run")) for c in raw],
            "required": [bool(c.get("required", False)) for c in raw],
            "duration_s": [_number(c.get("duration_s")) for c in raw],
            "details": [json.dumps(c.get("details", {}), indent=1, sort_keys=True, default=str) for c in raw],
        }
    )
    df["suite"] = df["id"].str.split(".").str[0]
    df["suite_rank"] = df["suite"].map(lambda s: SUITES.index(s) if s in SUITES else len(SUITES))
    df = df.sort_values(["suite_rank", "suite", "id"], kind="stable")
    counts = pd.crosstab(df["suite"], df["status"]).reindex(columns=list(STATUSES), fill_value=0)
    counts = counts.reindex(sorted(counts.index, key=lambda s: (SUITES.index(s) if s in SUITES else len(SUITES), s)))
    summary = [
        {"suite": suite, **{s: int(row[s]) for s in STATUSES}, "total": int(row.sum())} for suite, row in counts.iterrows()
    ]
    blocking = df[df["required"] & (df["status"] != "passed")]["id"].tolist()
    rows = [
        {k: rec[k] for k in ("id", "suite", "status", "required", "details")}
        | {"duration_s": None if pd.isna(rec["duration_s"]) else float(rec["duration_s"])}
        for rec in df.to_dict("records")
    ]
    return {"checks": rows, "summary": summary, "blocking": [str(b) for b in blocking]}


def _compact(value: Any) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True, default=str)


def _faults(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fault checks grouped by the kind each recorded (``details.fault_kind``: network, process, memory…),
    each with the fault, what the client saw, the evidence row and how long recovery took (``recovery_ms``)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in results.get("checks", []):
        if not str(c["id"]).startswith("faults."):
            continue
        raw = c.get("details")
        details: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        # a check skipped before it ran (declared out for this engine) recorded no kind: its reason says why
        kind = str(details.get("fault_kind") or ("not run here" if c.get("status") == "skipped" else "unclassified"))
        groups.setdefault(kind, []).append(
            {
                "id": c["id"],
                "status": str(c.get("status", "not_run")),
                "fault": _compact(details.get("fault")),
                "client": _compact(details.get("client")),
                "evidence": _compact(details.get("evidence") or details.get("failed_event")),
                "recovery_ms": _number(details.get("recovery_ms")),
                "reason": str(details.get("reason") or ""),
            }
        )
    return [{"kind": k, "rows": sorted(groups[k], key=lambda r: r["id"])} for k in sorted(groups)]


def _arm(section: Mapping[str, Any], arm: str, field: str) -> Mapping[str, Any]:
    value = section.get(arm, {})
    inner = value.get(field, {}) if isinstance(value, Mapping) else {}
    return inner if isinstance(inner, Mapping) else {}


def _overhead(results: Mapping[str, Any]) -> dict[str, Any]:
    """The page's ``overhead_charts``, ``overhead_rows`` (figures) and ``overhead_facts`` (the run's) from the
    certify.perf JSON, or from the predicate's metrics alone."""
    overhead = results.get("overhead")
    metrics = results.get("metrics") if isinstance(results.get("metrics"), Mapping) else {}
    charts: list[Markup] = []
    rows: list[dict[str, Any]] = []
    if overhead is None:
        added = metrics.get("gateway_added_latency_ms") if isinstance(metrics, Mapping) else None
        if isinstance(added, Mapping):
            bound = overhead_bound_ms(None)
            series: dict[str, list[float | None]] = {"gateway": [_number(added.get(p)) for p in PERCENTILES]}
            chart = _added_bars(
                "overhead-metrics-added", "Gateway added latency (signed metrics)", series, f"bound {bound:.0f} ms", bound
            )
            charts.append(chart)
        return {"overhead_charts": charts, "overhead_rows": rows, "overhead_facts": {}}
    if not isinstance(overhead, Mapping) or not isinstance(overhead.get("results"), Mapping):
        raise _invalid("results.overhead must be the JSON written by certify.perf (with a 'results' object)")
    res = overhead["results"]
    rps: dict[str, list[float | None]] = {"direct": [], "gateway": [], "reference": []}
    kinds = [k for k in ("unary", "stream") if isinstance(res.get(k), Mapping)]
    for kind in kinds:
        section = res[kind]
        direct = section.get("direct", {}) if isinstance(section.get("direct"), Mapping) else {}
        bound = overhead_bound_ms(_number(direct.get("p50_ms")))
        added = _per_arm(section, "added_latency_ms")
        charts.append(
            _added_bars(
                f"overhead-{kind}-added", f"Added end-to-end latency, {kind} (c=1)", added, f"§15.4 bound {bound:.1f} ms", bound
            )
        )
        xs = [0.0, 1.0, 2.0]  # ordinal: p95 and p99 would crowd each other on a linear percentile axis
        lines = {"direct": [(x, 0.0) for x in xs]} | {
            arm: [(x, v) for x, v in zip(xs, vals, strict=True) if v is not None] for arm, vals in added.items()
        }
        charts.append(
            line_chart(
                f"overhead-{kind}-percentiles",
                f"Added latency by percentile, {kind}",
                lines,
                x_label="percentile",
                y_label="ms added vs direct",
                x_ticks=list(zip(xs, PERCENTILES, strict=True)),
            )
        )
        if kind == "stream":
            ttft = _per_arm(section, "ttft_added_ms")
            charts.append(
                _added_bars(
                    "overhead-stream-ttft", "Added time to first token, stream (c=1)", ttft, f"§15.4 bound {bound:.1f} ms", bound
                )
            )
        for arm in ("direct", "gateway", "reference"):
            entry = section.get(arm, {}) if isinstance(section.get(arm), Mapping) else {}
            rps[arm].append(_number(entry.get("rps_c32")))
            row: dict[str, Any] = {"kind": kind, "arm": arm, "rps_c32": _number(entry.get("rps_c32"))}
            if arm == "direct":
                row["direct_p50_ms"] = _number(entry.get("p50_ms"))
            else:
                a = _arm(section, arm, "added_latency_ms")
                t = _arm(section, arm, "ttft_added_ms")
                row |= {f"added_{p}": _number(a.get(p)) for p in PERCENTILES}
                row |= {f"ttft_{p}": _number(t.get(p)) for p in PERCENTILES}
                row |= _interval_cells(entry.get("added_latency_ci_ms"))
                row["ratio_vs_direct"] = _number(entry.get("throughput_ratio_vs_direct_c32"))
                row["cpu_ms_c32"] = _number(entry.get("cpu_ms_per_request_c32"))
                decided = entry.get("over_bound")  # the measurement's own decision (certify.perf.summary)
                if isinstance(decided, list):
                    row["within_bound"] = not decided
                else:  # an older JSON: the upper ends of the added intervals
                    row["within_bound"] = all(v is not None and v <= bound for v in _bound_values(row))
                paired, target = entry.get("added_paired_ms"), entry.get("paired_target")
                row["paired"] = (
                    {k: _number(paired.get(k)) for k in ("estimate", "low", "high")}
                    | {"n": paired.get("n"), "verdict": target.get("verdict") if isinstance(target, Mapping) else None}
                    if isinstance(paired, Mapping)
                    else None
                )
                resid = entry.get("residence_ci_ms")
                row["residence"] = (
                    {p: _number(resid[p].get("estimate")) for p in PERCENTILES} if isinstance(resid, Mapping) else None
                )
            rows.append(row)
    if kinds:
        charts.append(bar_chart("overhead-throughput-c32", "Throughput at concurrency 32", kinds, rps, y_label="requests/s"))
    facts = {k: overhead.get(k) for k in ("engine", "rounds", "requests_c1", "seconds_c32", "capture") if k in overhead}
    rss = res.get("gateway_rss_bytes_per_open_stream")
    if _number(rss) is not None:
        facts["gateway KiB per open stream"] = round(float(rss) / 1024, 1)
    return {"overhead_charts": charts, "overhead_rows": rows, "overhead_facts": facts}


def _per_arm(section: Mapping[str, Any], field: str) -> dict[str, list[float | None]]:
    """``field``'s percentiles for the gateway and reference arms of one section."""
    return {arm: [_number(_arm(section, arm, field).get(p)) for p in PERCENTILES] for arm in ("gateway", "reference")}


def _added_bars(chart_id: str, title: str, series: dict[str, list[float | None]], bound_label: str, bound: float) -> Markup:
    """Milliseconds added over direct, per percentile and arm, against the pass line."""
    return bar_chart(chart_id, title, list(PERCENTILES), series, y_label="ms added vs direct", ref_lines=[(bound_label, bound)])


def _bound_values(row: Mapping[str, Any]) -> list[float | None]:
    """The p50/p95 added latencies the §15.4 pass line applies to: the upper end of each interval when
    the figures carry one, else the point figures."""
    return [row[f"ci_{p}"]["high"] if row.get(f"ci_{p}") else row.get(f"added_{p}") for p in ("p50", "p95")]


def _interval_cells(ci: Any) -> dict[str, Any]:
    """Per percentile: the interval and what it says about the figure (None when the JSON has none)."""
    cells: dict[str, Any] = {}
    for p in PERCENTILES:
        entry = ci.get(p) if isinstance(ci, Mapping) else None
        if not isinstance(entry, Mapping):
            cells[f"ci_{p}"] = None
            continue
        low, high, estimate = _number(entry.get("low")), _number(entry.get("high")), _number(entry.get("estimate"))
        notes = []
        if low is not None and high is not None and low <= 0 <= high:
            negative = estimate is not None and estimate < 0
            notes.append("negative: noise, not a speed-up" if negative else "noise (interval holds 0)")
        if entry.get("reliable") is False:
            notes.append(f"unreliable: n={entry.get('n')} per arm")
        cells[f"ci_{p}"] = {"low": low, "high": high, "n": entry.get("n"), "note": "; ".join(notes)}
    return cells


def _lifecycle(results: Mapping[str, Any]) -> dict[str, Any]:
    """The page's ``timings``, ``lifecycle_charts`` and ``bounds`` (each lifecycle metric against its limit)."""
    lifecycle = results.get("lifecycle")
    if lifecycle is not None and not isinstance(lifecycle, Mapping):
        raise _invalid("results.lifecycle must be an object of timing name -> number")
    timings = flatten(lifecycle) if lifecycle else []
    numeric = [(k, _number(v)) for k, v in timings if _number(v) is not None]
    charts: list[Markup] = []
    if numeric:
        charts.append(
            bar_chart(
                "lifecycle-timings",
                "Lifecycle timings",
                [k for k, _ in numeric],
                {"timing": [v for _, v in numeric]},
                y_label="as recorded (see names for units)",
            )
        )
    metrics = results.get("metrics") if isinstance(results.get("metrics"), Mapping) else {}
    bounds = []
    for key, (limit, unit) in LIFECYCLE_BOUNDS.items():
        value = _number(metrics.get(key)) if isinstance(metrics, Mapping) else None
        bounds.append({"metric": key, "value": value, "limit": limit, "unit": unit, "ok": value is not None and value <= limit})
    return {"timings": timings, "lifecycle_charts": charts, "bounds": bounds}


def _evidence(evidence: Mapping[str, Any], out_dir: Path) -> list[dict[str, Any]]:
    """Each evidence file: its name and digest, a link to the kept bytes and, for text, the start of it inline."""
    rows: list[dict[str, Any]] = []
    for name, digest in sorted((str(k), str(v)) for k, v in evidence.items()):
        blob = f"{EVIDENCE_DIR}/sha256-{digest.removeprefix('sha256:')}"
        path = out_dir / blob
        row: dict[str, Any] = {"name": name, "digest": digest, "href": None, "size": None, "preview": None, "truncated": False}
        if path.is_file():
            data = path.read_bytes()
            row.update(href=blob, size=len(data))
            try:
                text = data[:EVIDENCE_PREVIEW_BYTES].decode("utf-8")
            except UnicodeDecodeError:
                text = None  # binary, or a character cut at the preview's end: the link has it whole
            row.update(preview=text, truncated=len(data) > EVIDENCE_PREVIEW_BYTES)
        rows.append(row)
    return rows


def build_run_page(results: dict[str, Any], out_dir: Path, *, name: str = "run.html") -> Path:
    """Write the per-run page for ``results`` to ``out_dir/name``; returns its path."""
    if not isinstance(results, Mapping):
        raise _invalid("results must be a JSON object")
    checks = _checks(results)
    faults = _faults(results)
    evidence = results.get("evidence", {})
    if not isinstance(evidence, Mapping):
        raise _invalid("results.evidence must be an object of name -> digest")
    evidence_rows = _evidence(evidence, Path(out_dir))
    hardware = results.get("hardware", {})
    overhead = _overhead(results)
    lifecycle = _lifecycle(results)
    facts = [
        (k, results.get(k))
        for k in ("runtime_id", "model_id", "inference_id", "device", "engine", "profile", "suite_version", "project_commit")
    ]
    model = results.get("model")
    if isinstance(model, Mapping):  # the model in words, beside its digest (entries before schema 2 lack it)
        facts[2:2] = [(f"model_{k}", model.get(k)) for k in MODEL_FACTS]
    return write_page(
        Path(out_dir),
        name,
        "run.html.j2",
        level=str(results.get("level", "unknown")),
        reasons=[str(r) for r in results.get("reasons", []) or []],
        facts=facts,
        faults=faults,
        evidence=evidence_rows,
        hardware=flatten(hardware) if hardware else [],
        metrics=flatten(results.get("metrics")) if results.get("metrics") else [],
        percentiles=PERCENTILES,
        **checks,
        **overhead,
        **lifecycle,
    )
