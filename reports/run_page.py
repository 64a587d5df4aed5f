"""The per-run page, summary first: the verdict in words, then every check as a sentence, faults, overhead,
lifecycle, the session's timeline (:mod:`reports.timeline`), metrics, hardware and evidence.

Input is one run's ``results.json``: a DESIGN §6 predicate plus, optionally, ``overhead`` (the JSON that
``python -m certify.perf --out`` writes; :mod:`reports.overhead_view`) and ``lifecycle`` (a mapping of timing
name to number, possibly nested; a name ending ``_ms`` or ``_s`` says its unit). The summary block is
:mod:`reports.verdict`. Each check row shows its one-line ``summary`` (the evaluator writes it from the
check's declaration) with the raw details in a closed ``<details>`` element: no JSON is visible until
expanded. The fault tables say the fault, what the client saw and what was recorded in words and badges.
Charts carry one unit each (lifecycle timings are charted per unit). Missing parts are shown as missing,
never invented; a present part of the wrong type is a ``report_input_invalid`` error.

A published page names no local path: evidence links are relative to the page, and nothing here prints the
report directory or the machine's paths.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from harness.contracts.certification import check_status
from harness.errors import HitchError
from reports.figures import PERCENTILES, duration_words, number
from reports.overhead_view import overhead_section
from reports.render import STATUS_CLASSES, flatten, write_page
from reports.svg import bar_chart
from reports.timeline import timeline_section
from reports.verdict import verdict

__all__ = ["SUITES", "build_run_page"]

SUITES = ("hardware", "protocol", "correctness", "faults", "security", "lifecycle", "perf", "agents")
STATUSES = ("passed", "failed", "skipped", "not_run", "not_applicable")
# DESIGN §6 lifecycle lines: a cancelled request frees its slot within 5 s; idle stop within TTL + 10 s.
EVIDENCE_DIR = "evidence"  # the run's evidence store beside the page (catalog.evidence)
EVIDENCE_PREVIEW_BYTES = 2048
LIFECYCLE_BOUNDS = {"cancel_slot_free_ms": (5000.0, "ms"), "idle_stop_after_ttl_s": (10.0, "s")}
TIMING_UNITS = (("_ms", "ms"), ("_s", "s"))

MODEL_FACTS = ("name", "architecture", "parameters", "license", "source")


def _invalid(message: str, **details: Any) -> HitchError:
    return HitchError("report_input_invalid", message, details)


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
            "status": [check_status(c) for c in raw],
            "required": [bool(c.get("required", False)) for c in raw],
            "duration_s": [number(c.get("duration_s")) for c in raw],
            "sentence": [str(c.get("summary") or "") for c in raw],
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
        {k: rec[k] for k in ("id", "suite", "status", "required", "sentence", "details")}
        | {"duration": duration_words(None if pd.isna(rec["duration_s"]) else float(rec["duration_s"]) * 1000)}
        for rec in df.to_dict("records")
    ]
    return {"checks": rows, "summary": summary, "blocking": [str(b) for b in blocking]}


def _words(value: Any) -> str:
    """A detail value in words: ``{"mode": "reset", "after_events": 2}`` -> ``reset, after events 2``."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("{", "[")):
            try:
                return _words(json.loads(text))
            except json.JSONDecodeError:
                return value
        return value
    if isinstance(value, Mapping):
        head = [str(value["mode"])] if isinstance(value.get("mode"), str) else []
        rest = [
            k.replace("_", " ")
            if v is True
            else f"no {k.replace('_', ' ')}"
            if v is False
            else f"{k.replace('_', ' ')} {_words(v)}"
            for k, v in value.items()
            if k != "mode" and v is not None
        ]
        return ", ".join(head + rest)
    if isinstance(value, list):
        return "; ".join(_words(v) for v in value)
    return "" if value is None else str(value)


_HTTP_KEYS = ("status", "http_status", "next_request")
_CODE_KEYS = ("code", "error_code")


def _chips(value: Any) -> list[dict[str, str]]:
    """What the client saw or what was recorded, as small badges: HTTP statuses, error codes, outcomes."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [{"text": _words(value), "cls": "info"}]
    chips = []
    for key, v in value.items():
        if v is None:
            continue
        if key in _HTTP_KEYS and isinstance(v, int) and not isinstance(v, bool):
            chips.append({"text": f"HTTP {v}", "cls": "ok" if v < 400 else "bad"})
        elif key in _CODE_KEYS and isinstance(v, str):
            chips.append({"text": v, "cls": "warn"})
        elif key == "status" and isinstance(v, str):
            chips.append({"text": v, "cls": STATUS_CLASSES.get(v, "ok" if v == "completed" else "info")})
        elif isinstance(v, bool):
            chips.append({"text": key.replace("_", " ") if v else f"not {key.replace('_', ' ')}", "cls": "info"})
        else:
            chips.append({"text": f"{key.replace('_', ' ')}: {_words(v)}", "cls": "info"})
    return chips


def _faults(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fault checks grouped by the kind each recorded (``details.fault_kind``: network, process, memory…),
    each with the fault, what the client saw, what was recorded and how long recovery took (``recovery_ms``)."""
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
                "fault": _words(details.get("fault")),
                "client": _chips(details.get("client")),
                "recorded": _chips(details.get("evidence") or details.get("failed_event")),
                "recovery": duration_words(number(details.get("recovery_ms")))
                if number(details.get("recovery_ms")) is not None
                else "",
                "reason": str(details.get("reason") or "").removeprefix(f"{c['id']} "),
            }
        )
    return [{"kind": k, "rows": sorted(groups[k], key=lambda r: r["id"])} for k in sorted(groups)]


def _unit_of(name: str) -> str | None:
    leaf = name.rsplit(".", 1)[-1]
    return next((unit for suffix, unit in TIMING_UNITS if leaf.endswith(suffix)), None)


def _lifecycle(results: Mapping[str, Any]) -> dict[str, Any]:
    """The page's ``timings``, ``lifecycle_charts`` (one per unit) and ``bounds`` (each lifecycle metric against its limit)."""
    lifecycle = results.get("lifecycle")
    if lifecycle is not None and not isinstance(lifecycle, Mapping):
        raise _invalid("results.lifecycle must be an object of timing name -> number")
    timings = flatten(lifecycle) if lifecycle else []
    by_unit: dict[str, list[tuple[str, float]]] = {}
    rows = []
    for name, value in timings:
        unit, figure = _unit_of(name), number(value)
        rows.append({"name": name, "value": value, "unit": unit or "", "words": _timing_words(figure, unit)})
        if unit is not None and figure is not None:
            by_unit.setdefault(unit, []).append((name, figure))
    charts: list[Markup] = [
        bar_chart(
            f"lifecycle-timings-{unit}", f"Lifecycle timings in {unit}", [k for k, _ in pairs], {"timing": [v for _, v in pairs]},
            unit=unit,
        )
        for unit, pairs in sorted(by_unit.items())
    ]  # fmt: skip
    metrics = results.get("metrics") if isinstance(results.get("metrics"), Mapping) else {}
    bounds = []
    for key, (limit, unit) in LIFECYCLE_BOUNDS.items():
        value = number(metrics.get(key)) if isinstance(metrics, Mapping) else None
        bounds.append({"metric": key, "value": value, "limit": limit, "unit": unit, "ok": value is not None and value <= limit})
    return {"timings": rows, "lifecycle_charts": charts, "bounds": bounds}


def _timing_words(value: float | None, unit: str | None) -> str:
    if value is None or unit is None:
        return ""
    return duration_words(value if unit == "ms" else value * 1000)


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
    overhead = overhead_section(results)
    lifecycle = _lifecycle(results)
    timeline = timeline_section(results)
    facts = [
        (k, results.get(k))
        for k in ("runtime_id", "model_id", "inference_id", "device", "engine", "profile", "suite_version", "project_commit")
    ]
    model = results.get("model")
    if isinstance(model, Mapping):  # the model in words, beside its digest (entries before schema 2 lack it)
        facts[2:2] = [(f"model_{k}", model.get(k)) for k in MODEL_FACTS]
    metrics = results.get("metrics") if isinstance(results.get("metrics"), Mapping) else {}
    headline_keys = ("gateway_added_latency_ms", "gateway_latency_difference_ms")  # shown in the overhead section
    other_metrics = {k: v for k, v in (metrics or {}).items() if k not in headline_keys and v is not None}
    return write_page(
        Path(out_dir),
        name,
        "run.html.j2",
        level=str(results.get("level", "unknown")),
        subject=_subject(results),
        verdict=verdict(results, SUITES),
        facts=facts,
        faults=faults,
        evidence=evidence_rows,
        hardware=flatten(hardware) if hardware else [],
        metrics=flatten(other_metrics) if other_metrics else [],
        percentiles=PERCENTILES,
        **checks,
        **overhead,
        **lifecycle,
        **timeline,
    )


def _subject(results: Mapping[str, Any]) -> str:
    """What was certified, in one line: the model by name, the runtime, the device and engine, when."""
    model = results.get("model") if isinstance(results.get("model"), Mapping) else None
    who = str((model or {}).get("name") or str(results.get("model_id") or "unknown model")[:19])
    runtime = str(results.get("runtime_name") or str(results.get("runtime_id") or "no runtime")[:19])
    parts = [who, runtime, f"{results.get('device', '?')} · {results.get('engine', '?')}", str(results.get("profile") or "")]
    if results.get("finished_at"):
        parts.append(f"finished {results['finished_at']}")
    return " · ".join(p for p in parts if p)
