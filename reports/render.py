"""The one Jinja2 environment of the reports (autoescape always on) and the atomic page writer.

Templates live in ``reports/templates``; each page extends ``base.html.j2``, which inlines its CSS, so a
written page is one self-contained file with no network reference. Values reach the markup only through
the templates (escaped) or through :mod:`reports.svg` (escaped there, then marked safe).

A page is meant to be published, so it names no path of the machine that wrote it: before rendering, every
string of the page's context has the report directory, ``HITCH_ROOT``, the home directory and the temporary
directory replaced by ``[report dir]``, ``$HITCH_ROOT``, ``~`` and ``$TMPDIR`` (:func:`redact_paths`; a check's
details or an error message may hold one). Links are relative to the page.
"""

from __future__ import annotations

import datetime as dt
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from harness.errors import HitchError
from harness.paths import atomic_write_bytes, resolve_root

__all__ = ["STATUS_CLASSES", "STATUS_WORDS", "environment", "flatten", "fmt_num", "local_paths", "redact_paths", "write_page"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
STATUS_CLASSES = {
    "passed": "ok",
    "certified": "ok",
    "provisional": "warn",
    "contract": "info",
    "skipped": "warn",
    "not_run": "warn",
    "not_applicable": "warn",
    "failed": "bad",
}
# how a check status reads on a page: a check not applicable showed nothing, and says so
STATUS_WORDS = {"not_applicable": "not shown", "not_run": "not run"}


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


def _dotbreak(value: Any) -> Markup:
    """A dotted id that wraps at its dots (``<wbr>`` after each), not inside a word."""
    parts = str(value).split(".")
    return Markup(".<wbr>").join(Markup.escape(part) for part in parts)


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
        env.filters["status_word"] = lambda status: STATUS_WORDS.get(str(status), str(status))
        env.filters["dotbreak"] = _dotbreak
        _ENV = env
    return _ENV


def local_paths(out_dir: Path) -> list[tuple[str, str]]:
    """(path, label) of the machine's directories a page must not name, the longest first."""
    pairs: dict[str, str] = {}
    machine = ((Path(tempfile.gettempdir()), "$TMPDIR"), (Path.home(), "~"), (resolve_root(), "$HITCH_ROOT"))
    for path, label in (*machine, (Path(out_dir), "[report dir]")):
        for variant in {str(path), str(path.absolute()), str(path.resolve())}:
            if len(variant) > 1:  # never "/"
                pairs[variant] = label
    return sorted(pairs.items(), key=lambda kv: len(kv[0]), reverse=True)


def redact_paths(value: Any, pairs: list[tuple[str, str]]) -> Any:
    """``value`` with every string's local paths replaced by their labels (mappings, lists and tuples walked)."""
    if isinstance(value, str):
        out = str(value)
        for path, label in pairs:
            out = out.replace(path, label)
        return Markup(out) if isinstance(value, Markup) else out
    if isinstance(value, Mapping):
        return {redact_paths(k, pairs): redact_paths(v, pairs) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_paths(v, pairs) for v in value)
    return value


def write_page(out_dir: Path, name: str, template: str, **context: Any) -> Path:
    """Render ``template`` with ``context`` (its local paths redacted) and write it to ``out_dir/name``
    atomically; returns the path."""
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    clean = redact_paths(context, local_paths(Path(out_dir)))
    html = environment().get_template(template).render(generated=generated, **clean)
    path = Path(out_dir) / name
    try:
        atomic_write_bytes(path, html.encode("utf-8"))
    except OSError as exc:
        raise HitchError("storage_write_failed", f"cannot write report page {path}", {"path": str(path)}) from exc
    return path
