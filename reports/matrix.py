"""The support matrix: which runtime, model, device and profile reached which level, from verified entries only.

Every ``*.dsse.json`` under the entries directory goes through the verify function (by default
``catalog.signing.verify_envelope``, imported lazily so this module loads without it). An entry that does not
parse, does not verify, or whose predicate lacks the matrix fields is *rejected*: it never contributes a row
and is listed apart with the reason. For each combination the newest verified entry makes the row; its
history (the last :data:`HISTORY` entries, oldest first) shows as a trend of level and the key figures: the
checks passed, and the decided overhead (time in the gateway at p50 and the §15.4 verdict; an entry signed
before schema 3 holds only the black-box difference, which is labelled, not charted).

The page is meant to be published: it names no local path (links are relative to the page, the entries
directory and the key directories are not printed — only the trusted key ids). Rows filter by device, runtime
and model without scripts (radio inputs and CSS ``:has()``, generated per value). ``compare.html`` beside it
shows any two verified entries side by side (two radio groups; CSS shows the two chosen columns).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from markupsafe import Markup

from catalog.signing import verify_envelope
from harness.contracts.certification import check_status
from harness.errors import HitchError
from reports.figures import ms, number
from reports.render import write_page

__all__ = [
    "ENTRY_GLOB",
    "HISTORY",
    "LEVELS",
    "MATRIX_KEY",
    "KeysDirs",
    "Rejected",
    "VerifiedLike",
    "VerifyFn",
    "build_matrix",
    "collect_entries",
]

ENTRY_GLOB = "*.dsse.json"
LEVELS = ("certified", "provisional", "contract", "failed")
MATRIX_KEY = ("runtime_id", "model_id", "device", "profile")
DATE_FIELDS = ("created_at", "finished_at", "date")
HISTORY = 5  # entries per combination in the trend
FILTERS = (("device", "device"), ("runtime_name", "runtime"), ("model_label", "model"))


class VerifiedLike(Protocol):
    """What the builder reads from ``catalog.signing.VerifiedEntry``."""

    @property
    def keyid(self) -> str: ...

    @property
    def predicate(self) -> Mapping[str, Any]: ...


KeysDirs = Path | Sequence[Path]
VerifyFn = Callable[[dict[str, Any], KeysDirs], VerifiedLike]


@dataclass(frozen=True)
class Rejected:
    file: str
    code: str
    reason: str


def _default_verify(envelope: dict[str, Any], keys_dir: KeysDirs) -> VerifiedLike:
    result: VerifiedLike = verify_envelope(envelope, keys_dir)
    return result


def _date(predicate: Mapping[str, Any], path: Path) -> tuple[str, bool]:
    """The entry's date: a signed predicate field when present, else the file's mtime (marked unsigned)."""
    for field in DATE_FIELDS:
        value = predicate.get(field)
        if isinstance(value, str) and value:
            return value, True
    mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    return mtime.strftime("%Y-%m-%dT%H:%M:%SZ"), False


def _run_page_for(path: Path) -> Path | None:
    stem = path.name.removesuffix(".dsse.json")
    page = path.with_name(stem + ".run.html")
    return page if page.is_file() else None


def collect_entries(
    entries_dir: Path, keys_dir: KeysDirs, verify: VerifyFn | None = None
) -> tuple[list[dict[str, Any]], list[Rejected]]:
    """Verify every entry file; returns (verified rows, rejected entries), both sorted by file name."""
    verify_fn = verify or _default_verify
    if not entries_dir.is_dir():
        raise HitchError("report_input_invalid", f"entries directory {entries_dir} does not exist", {"path": str(entries_dir)})
    rows: list[dict[str, Any]] = []
    rejected: list[Rejected] = []
    for path in sorted(entries_dir.glob(ENTRY_GLOB)):
        try:
            envelope = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            rejected.append(Rejected(path.name, "unreadable", f"not a JSON envelope: {exc}"))
            continue
        if not isinstance(envelope, dict):
            rejected.append(Rejected(path.name, "unreadable", "not a JSON object"))
            continue
        try:
            verified = verify_fn(envelope, keys_dir)
        except HitchError as exc:
            rejected.append(Rejected(path.name, exc.code, exc.message))
            continue
        predicate = verified.predicate
        missing = [f for f in (*MATRIX_KEY, "level", "project_commit") if not isinstance(predicate.get(f), str)]
        if missing:
            rejected.append(Rejected(path.name, "predicate_incomplete", "signed predicate lacks " + ", ".join(missing)))
            continue
        if predicate["level"] not in LEVELS:
            rejected.append(Rejected(path.name, "predicate_incomplete", f"unknown level {predicate['level']!r}"))
            continue
        date, signed_date = _date(predicate, path)
        rows.append(
            {
                **{k: predicate[k] for k in MATRIX_KEY},
                "level": predicate["level"],
                "reasons": [str(r) for r in predicate.get("reasons", []) if r],
                "engine": str(predicate.get("engine", "")),
                "runtime_name": str(predicate.get("runtime_name") or predicate["runtime_id"]),
                "model": _model_words(predicate.get("model")),
                "commit": predicate["project_commit"],
                "date": date,
                "date_signed": signed_date,
                "keyid": verified.keyid,
                "file": path,
                "predicate": predicate,
            }
        )
    return rows, rejected


def _figures(predicate: Mapping[str, Any]) -> dict[str, Any]:
    """An entry's key figures for its history: checks passed, and the decided overhead (schema 3) or, for an
    older entry, its black-box difference labelled as such."""
    checks = [c for c in predicate.get("checks") or [] if isinstance(c, Mapping)]
    metrics = predicate.get("metrics") if isinstance(predicate.get("metrics"), Mapping) else {}
    headline = (metrics or {}).get("gateway_added_latency_ms")
    residence = None
    verdict = None
    legacy = None
    if isinstance(headline, Mapping) and isinstance(headline.get("unary"), Mapping):
        verdict = headline.get("verdict")
        p50 = (headline["unary"].get("residence_ms") or {}).get("p50") or {}
        residence = ms(p50) if isinstance(p50, Mapping) else None
    elif isinstance(headline, Mapping) and number(headline.get("p50")) is not None:
        legacy = f"{float(headline['p50']):+.1f} ms black-box difference (schema 2, no interval)"
    return {
        "passed": sum(1 for c in checks if check_status(c) == "passed"),
        "total": len(checks),
        "residence": residence,
        "overhead_verdict": verdict,
        "legacy": legacy,
    }


def _model_words(model: Any) -> dict[str, str] | None:
    """The signed model facts as display strings (name, architecture, parameters, license, source), if any."""
    if not isinstance(model, Mapping) or not model.get("name"):
        return None
    params = model.get("parameters")
    return {
        "name": str(model["name"]),
        "architecture": str(model.get("architecture") or ""),
        "parameters": f"{params / 1e6:.1f}M parameters" if isinstance(params, int) else "",
        "license": str(model.get("license") or ""),
        "source": str(model.get("source") or ""),
    }


def _href(target: Path, out_dir: Path) -> str:
    """A file-relative link (never a network URL) from the page's directory to ``target``."""
    return Path(os.path.relpath(target.resolve(), out_dir.resolve())).as_posix()


def _entry_view(rec: Mapping[str, Any], out_dir: Path, index: int) -> dict[str, Any]:
    page = _run_page_for(rec["file"])
    return {
        "key": f"e{index}",
        "level": rec["level"],
        "date": rec["date"],
        "date_signed": rec["date_signed"],
        "commit": str(rec["commit"])[:12],
        "keyid": rec["keyid"],
        "entry_href": _href(rec["file"], out_dir),
        "entry_name": rec["file"].name,
        "run_href": _href(page, out_dir) if page else None,
        **_figures(rec["predicate"]),
    }


def _model_label(rec: Mapping[str, Any]) -> str:
    model = rec.get("model")
    return str(model["name"]) if isinstance(model, Mapping) and model.get("name") else str(rec["model_id"])[:19]


def _matrix_rows(rows: list[dict[str, Any]], out_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per combination with its history, every verified entry for the compare page, newest first)."""
    if not rows:
        return [], []
    records = sorted(rows, key=lambda r: (str(r["date"]), str(r["file"])))
    views = {id(rec): _entry_view(rec, out_dir, i) for i, rec in enumerate(records)}
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for rec in records:
        groups.setdefault(tuple(str(rec[k]) for k in MATRIX_KEY), []).append(rec)
    out: list[dict[str, Any]] = []
    for key in sorted(groups):
        history = groups[key]
        rec = history[-1]
        out.append(
            {
                **{k: rec[k] for k in (*MATRIX_KEY, "runtime_name", "model", "level", "reasons", "engine")},
                **views[id(rec)],
                "model_label": _model_label(rec),
                "entries": len(history),
                "history": [views[id(r)] for r in history[-HISTORY:]],
            }
        )
    compare = [
        {
            **views[id(rec)],
            **{k: rec[k] for k in (*MATRIX_KEY, "runtime_name", "engine")},
            "model_label": _model_label(rec),
            "statuses": {
                str(c.get("id")): check_status(c) for c in rec["predicate"].get("checks") or [] if isinstance(c, Mapping)
            },
        }
        for rec in reversed(records)
    ]
    return out, compare


def _filters(matrix: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Radio groups per filtered field (values keyed f0, f1…: no entry text reaches the CSS) and the CSS rules
    that hide the rows whose value is not the chosen one."""
    groups: list[dict[str, Any]] = []
    rules: list[str] = []
    for g, (field, label) in enumerate(FILTERS):
        values = sorted({str(row[field]) for row in matrix})
        keys = {v: f"f{g}v{i}" for i, v in enumerate(values)}
        for row in matrix:
            row.setdefault("filter_keys", {})[field] = keys[str(row[field])]
        groups.append({"field": field, "label": label, "name": f"f{g}", "options": [(keys[v], v) for v in values]})
        attr = f"data-{field.replace('_', '-')}"
        rules += [f'body:has(#{k}:checked) tr.matrix-row:not([{attr}="{k}"]) {{ display: none; }}' for k in keys.values()]
    return groups, rules


def _compare_rules(entries: list[dict[str, Any]]) -> list[str]:
    rules = []
    for e in entries:
        k = e["key"]
        rules.append(f"body:has(#a-{k}:checked) .col-{k}, body:has(#b-{k}:checked) .col-{k} {{ display: table-cell; }}")
    return rules


def build_matrix(entries_dir: Path, keys_dir: KeysDirs, out_dir: Path, *, verify: VerifyFn | None = None) -> Path:
    """Write ``out_dir/matrix.html`` (and ``compare.html``) from the entries that verify against ``keys_dir``
    (one dir or several)."""
    entries_dir, out_dir = Path(entries_dir), Path(out_dir)
    keys_dir = Path(keys_dir) if isinstance(keys_dir, str | Path) else [Path(k) for k in keys_dir]
    rows, rejected = collect_entries(entries_dir, keys_dir, verify)
    matrix, compare = _matrix_rows(rows, out_dir)
    filters, filter_css = _filters(matrix)
    level_counts = {lvl: sum(1 for r in matrix if r["level"] == lvl) for lvl in LEVELS}
    check_ids = sorted({cid for e in compare for cid in e["statuses"]})
    write_page(
        out_dir,
        "compare.html",
        "compare.html.j2",
        entries=compare,
        check_ids=check_ids,
        page_css=Markup("\n".join(_compare_rules(compare))),  # built from entry keys (e0, e1…) only
    )
    return write_page(
        out_dir,
        "matrix.html",
        "matrix.html.j2",
        matrix=matrix,
        rejected=[asdict(r) for r in rejected],
        level_counts=level_counts,
        keyids=sorted({r["keyid"] for r in rows}),
        key_dir_count=1 if isinstance(keys_dir, Path) else len(keys_dir),
        verified_count=len(rows),
        filters=filters,
        page_css=Markup("\n".join(filter_css)),  # built from value keys (f0v0…) only
        history_size=HISTORY,
    )
