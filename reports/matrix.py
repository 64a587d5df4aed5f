"""The support matrix: which runtime, model, device and profile reached which level, from verified entries only.

Every ``*.dsse.json`` under the entries directory goes through the verify function (by default
``catalog.signing.verify_envelope``, imported lazily so this module loads without it). An entry that does not
parse, does not verify, or whose predicate lacks the matrix fields is *rejected*: it never contributes a row
and is listed apart with the reason. For each combination the newest verified entry wins; older ones are
counted.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from catalog.signing import verify_envelope
from harness.errors import HitchError
from reports.render import write_page

__all__ = [
    "ENTRY_GLOB",
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
            }
        )
    return rows, rejected


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


def _matrix_rows(rows: list[dict[str, Any]], out_dir: Path) -> list[dict[str, Any]]:
    if not rows:
        return []
    df = pd.DataFrame(rows).sort_values(["date", "file"], key=lambda s: s.astype(str))
    counts = df.groupby(list(MATRIX_KEY)).size().rename("entries")
    newest = df.groupby(list(MATRIX_KEY), as_index=False).tail(1).join(counts, on=list(MATRIX_KEY))
    newest = newest.sort_values(list(MATRIX_KEY))
    out: list[dict[str, Any]] = []
    for rec in newest.to_dict("records"):
        page = _run_page_for(rec["file"])
        out.append(
            {
                **{
                    k: rec[k]
                    for k in (*MATRIX_KEY, "runtime_name", "model", "level", "reasons", "engine", "date", "date_signed", "keyid")
                },
                "commit": str(rec["commit"])[:12],
                "entries": int(rec["entries"]),
                "entry_href": _href(rec["file"], out_dir),
                "entry_name": rec["file"].name,
                "run_href": _href(page, out_dir) if page else None,
            }
        )
    return out


def build_matrix(entries_dir: Path, keys_dir: KeysDirs, out_dir: Path, *, verify: VerifyFn | None = None) -> Path:
    """Write ``out_dir/matrix.html`` from the entries that verify against ``keys_dir`` (one dir or several)."""
    entries_dir, out_dir = Path(entries_dir), Path(out_dir)
    keys_dir = Path(keys_dir) if isinstance(keys_dir, str | Path) else [Path(k) for k in keys_dir]
    rows, rejected = collect_entries(entries_dir, keys_dir, verify)
    matrix = _matrix_rows(rows, out_dir)
    level_counts = {lvl: sum(1 for r in matrix if r["level"] == lvl) for lvl in LEVELS}
    return write_page(
        out_dir,
        "matrix.html",
        "matrix.html.j2",
        matrix=matrix,
        rejected=rejected,
        level_counts=level_counts,
        entries_dir=str(entries_dir),
        keys_dirs=[str(keys_dir)] if isinstance(keys_dir, Path) else [str(k) for k in keys_dir],
        verified_count=len(rows),
    )
