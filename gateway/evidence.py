"""Per-request evidence: one ``RequestEvidenceV1`` row per physical request (spec §12.1, DESIGN §5).

Owns :class:`EvidenceLog`. A row links the gateway request id to the engine's request id and records the
run, inference id, epoch, route, queue / TTFT / end-to-end times, input / cached / output / reasoning
tokens as the engine reported them (reasoning is a subset of output, never added; unknown stays null),
the caller's output budget, status, HTTP status and error code. Rows are appended to
``<dir>/<binding_id>.requests.jsonl`` (0600) by the background writer; if its queue is full the row is
written at once on the caller's thread, so evidence is never dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.writer import BackgroundWriter, WriteItem, write_private
from harness.contracts.events import RequestEvidenceV1

__all__ = ["EvidenceLog"]


class EvidenceLog:
    def __init__(self, directory: Path, writer: BackgroundWriter) -> None:
        self.directory = directory
        self._writer = writer
        self.rows = 0

    def path_for(self, binding_id: str) -> Path:
        return self.directory / f"{binding_id}.requests.jsonl"

    def write(self, binding_id: str, fields: dict[str, Any]) -> RequestEvidenceV1:
        row = RequestEvidenceV1(**fields)
        item = WriteItem(self.path_for(binding_id), row.model_dump_json().encode() + b"\n")
        if not self._writer.submit(item):
            write_private(item)
        self.rows += 1
        return row
