"""Per-request evidence: one ``RequestEvidenceV1`` row per physical request (spec §12.1, DESIGN §5).

Owns :class:`EvidenceLog`. A row links the gateway request id to the engine's request id and records the
run, inference id, epoch, route, queue / TTFT / end-to-end times, input / cached / output / reasoning
tokens as the engine reported them (reasoning is a subset of output, never added; unknown stays null),
the caller's output budget, status, HTTP status and error code. Rows are appended to
``<dir>/<binding_id>.requests.jsonl`` (0600).

Cost on the request path is one list append: the gateway hands over the finished exchange (anything with
``evidence_fields()``, built with ``RequestEvidenceV1``'s types; the tests parse every row back through
that record), and rows are built and serialized on the background writer's thread. Rows are batched: the
first row after a flush schedules one flush ``flush_after_s`` later on the event loop, which hands one
write per file to the writer; if its queue is full the batch is written at once, so evidence is never
dropped. :meth:`flush` forces it (shutdown, tests).
"""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any, Protocol

from gateway.writer import BackgroundWriter, WriteItem, write_private

__all__ = ["EvidenceLog", "EvidenceSource"]

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class EvidenceSource(Protocol):
    """A finished exchange: its fields no longer change once handed to :meth:`EvidenceLog.write`."""

    def evidence_fields(self) -> dict[str, Any]: ...


def _encode_rows(rows: list[EvidenceSource]) -> bytes:
    return "".join(_ENCODE({"schema_version": "1", **row.evidence_fields()}) + "\n" for row in rows).encode()


class EvidenceLog:
    def __init__(self, directory: Path, writer: BackgroundWriter, flush_after_s: float = 0.05) -> None:
        self.directory = directory
        self._writer = writer
        self._pending: dict[str, list[EvidenceSource]] = {}
        self._flush_after = flush_after_s
        self._scheduled: asyncio.TimerHandle | None = None
        self.rows = 0
        self.failed: set[str] = set()  # bindings with a row write that failed (their ledger is not complete)

    def path_for(self, binding_id: str) -> Path:
        return self.directory / f"{binding_id}.requests.jsonl"

    def write(self, binding_id: str, row: EvidenceSource) -> None:
        pending = self._pending.get(binding_id)
        if pending is None:
            self._pending[binding_id] = [row]
        else:
            pending.append(row)
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
        for binding_id, rows in pending.items():
            item = WriteItem(
                self.path_for(binding_id),
                functools.partial(_encode_rows, rows),
                on_error=functools.partial(self._failed, binding_id),
            )
            if not self._writer.submit(item):
                try:
                    write_private(item)
                except OSError:
                    self.failed.add(binding_id)

    def _failed(self, binding_id: str, _: OSError) -> None:
        self.failed.add(binding_id)
