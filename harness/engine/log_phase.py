"""What a starting engine is doing, read from the tail of its log: the phase a person waiting is shown.

SGLang 0.5.23 logs its start in a fixed order (``Load weight begin`` → ``Load weight end`` → the KV cache's
allocation → the HTTP server → ``The server is fired up and ready to roll!`` after its own warm-up); after that
hitch's readiness probes run. The fake engine logs the same markers. The line shown is the log's last non-empty
line, redacted again (the log is written redacted; a second pass costs nothing) and cut to 200 characters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.engine.redaction import redact_text

__all__ = ["engine_log_phase"]

_TAIL_BYTES = 16_384
_LINE_MAX = 200
# the last marker found in the tail decides; checked newest first
_MARKERS: tuple[tuple[str, str], ...] = (
    ("fired up and ready to roll", "probing"),
    ("Uvicorn running on", "warming up"),
    ("KV Cache is allocated", "warming up"),
    ("max_total_num_tokens", "warming up"),
    ("Load weight end", "allocating the KV cache"),
    ("Load weight begin", "loading weights"),
)


def _tail(path: Path) -> list[str]:
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL_BYTES))
            data = fh.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    return lines[1:] if size > _TAIL_BYTES and lines else lines


def engine_log_phase(path: Path | None) -> dict[str, Any]:
    """``{"step": ..., "last_log_line": ...}`` from the tail of the engine's log (only this epoch's part)."""
    if path is None:
        return {"step": "launching", "last_log_line": None}
    lines = _tail(path)
    for i in range(len(lines) - 1, -1, -1):  # only what this epoch wrote: after hitch's last header line
        if lines[i].startswith("==== hitch: "):
            lines = lines[i + 1 :]
            break
    last = next((line.strip() for line in reversed(lines) if line.strip()), None)
    step = "launching"
    for line in reversed(lines):
        found = next((name for marker, name in _MARKERS if marker in line), None)
        if found is not None:
            step = found
            break
    shown = redact_text(last)[:_LINE_MAX] if last is not None else None
    return {"step": step, "last_log_line": shown}
