"""Per-request evidence: one ``RequestEvidenceV1`` row per physical request (spec §12.1, DESIGN §5).

Owns :class:`EvidenceLog`. A row links the gateway request id to the engine's request id and records the
run, inference id, epoch, route, queue / TTFT / end-to-end times, input / cached / output / reasoning
tokens as the engine reported them (reasoning is a subset of output, never added; unknown stays null),
the caller's output budget, status, HTTP status and error code. Rows are appended to
``<dir>/<binding_id>.requests.jsonl`` (0600).

Cost on the request path is one ``json.dumps`` of a flat dict (the fields are built by the gateway with
``RequestEvidenceV1``'s types, and the tests parse every row back through that record). Rows are batched:
the first row after a flush schedules one flush ``flush_after_s`` later on the event loop, which hands one
write per file to the background writer; if its queue is full the batch is written at once, so evidence
is never dropped. :meth:`flush` forces it (shutdown, tests).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gateway.writer import BackgroundWriter, WriteItem, write_private

__all__ = ["EvidenceLog"]

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class EvidenceLog:
    def __init__(self, directory: Path, writer: BackgroundWriter, flush_after_s: float = 0.05) -> None:
        self.directory = directory
        self._writer = writer
        self._pending: dict[str, list[str]] = {}
        self._flush_after = flush_after_s
        self._scheduled: asyncio.TimerHandle | None = None
        self.rows = 0

    def path_for(self, binding_id: str) -> Path:
        return self.directory / f"{binding_id}.requests.jsonl"

    def write(self, binding_id: str, fields: dict[str, Any]) -> None:
        line = _ENCODE({"schema_version": "1", **fields})
        self._pending.setdefault(binding_id, []).append(line)
        self.rows += 1
        if self._scheduled is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._scheduled = loop.call_later(self._flush_after, self.flush)

    def flush(self) -> None:
        """Hand every pending row to the writer (one write per file)."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        pending, self._pending = self._pending, {}
        for binding_id, lines in pending.items():
            item = WriteItem(self.path_for(binding_id), ("\n".join(lines) + "\n").encode())
            if not self._writer.submit(item):
                write_private(item)
