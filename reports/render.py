"""The one Jinja2 environment of the reports (autoescape always on) and the atomic page writer.

Templates live in ``reports/templates``; each page extends ``base.html.j2``, which inlines its CSS, so a
written page is one self-contained file with no network reference. Values reach the markup only through
the templates (escaped) or through :mod:`reports.svg` (escaped there, then marked safe).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from harness.errors import HitchError
from harness.paths import atomic_write_bytes

__all__ = ["STATUS_CLASSES", "environment", "flatten", "fmt_num", "write_page"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
STATUS_CLASSES = {
    "passed": "ok",
    "certified": "ok",
    "provisional": "warn",
    "contract": "info",
    "skipped": "warn",
    "not_run": "warn",
    "failed": "bad",
}


def fmt_num(value: Any, digits: int = 2) -> str:
    """Numbers for tables: fixed digits, ``—`` for missing or non-finite values, anything else as text."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else "—"
    return str(value)


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings/lists as ``(dotted.key, leaf)`` pairs, in key order."""
    if isinstance(value, Mapping):
        out: list[tuple[str, Any]] = []
        for k in sorted(value, key=str):
            out.extend(flatten(value[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value and all(isinstance(v, Mapping | list) for v in value):
        return [pair for i, v in enumerate(value) for pair in flatten(v, f"{prefix}[{i}]")]
    return [(prefix, value)]


def _badge(status: Any) -> str:
    return STATUS_CLASSES.get(str(status), "info")


_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    """The shared environment: autoescape on for every template, undefined names are errors."""
    global _ENV
    if _ENV is None:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters["num"] = fmt_num
        env.filters["badge"] = _badge
        _ENV = env
    return _ENV


def write_page(out_dir: Path, name: str, template: str, **context: Any) -> Path:
    """Render ``template`` with ``context`` and write it to ``out_dir/name`` atomically; returns the path."""
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    html = environment().get_template(template).render(generated=generated, **context)
    path = Path(out_dir) / name
    try:
        atomic_write_bytes(path, html.encode("utf-8"))
    except OSError as exc:
        raise HitchError("storage_write_failed", f"cannot write report page {path}", {"path": str(path)}) from exc
    return path
