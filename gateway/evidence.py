"""Per-request evidence: one ``RequestEvidenceV1`` row per physical request (spec §12.1, DESIGN §5).

Owns :class:`EvidenceLog`. A row links the gateway request id to the engine's request id and records the
run, inference id, epoch, route, queue / TTFT / end-to-end times, input / cached / output / reasoning
tokens as the engine reported them (reasoning is a subset of output, never added; unknown stays null),
the caller's output budget, status, HTTP status and error code. Rows are appended to
``<dir>/<binding_id>.requests.jsonl`` (0600).

Cost on the request path is one list append: the gateway hands over the finished exchange (anything with
``evidence_fields()``, built with ``RequestEvidenceV1``'s types; the tests parse every row back through
that record), and rows are built and serialized on the background writer's thread. Rows are batched: the
first row after a flush schedules one flush ``flush_after_s`` (1 s) later on the event loop, which hands one
write per file to the writer; if its queue is full the batch is written at once, so evidence is never
dropped. :meth:`flush` forces it (shutdown, the end of a run, tests). A second, not 50 ms: at one request at
a time each request was its own batch, and the writer's wake-up, encoding and open/append/close cost ~0.35 ms
of CPU per request on a machine whose engine wants every core (``hitch bench overhead``: ~0.1 ms batched).

Each binding's file is tallied as it is written (:class:`RowTally`: rows, rows by status, token totals, the
file's sha256 and size), so the end of a run reads its attempt ledger in O(1) instead of re-reading its rows
(:meth:`take_tally` hands it over once); nothing per request stays in memory.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Protocol

from gateway.writer import BackgroundWriter, WriteItem, WriteJob, write_private

__all__ = ["EvidenceLog", "EvidenceSource", "RowTally"]

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class EvidenceSource(Protocol):
    """A finished exchange: its fields no longer change once handed to :meth:`EvidenceLog.write`."""

    def evidence_fields(self) -> dict[str, Any]: ...


def _encode_rows(rows: list[EvidenceSource]) -> tuple[bytes, list[dict[str, Any]]]:
    dicts = [{"schema_version": "1", **row.evidence_fields()} for row in rows]
    return "".join(_ENCODE(d) + "\n" for d in dicts).encode(), dicts


_TOKENS = ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")


class RowTally:
    """What one binding's rows file holds, counted as it is appended (file order: appends hold the lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows = 0
        self.size = 0
        self.by_status: dict[str, int] = {}
        self.tokens = dict.fromkeys(_TOKENS, 0)
        self.unavailable: dict[str, int] = {}  # per count: attempts that reached the engine without it
        self.timed_output_tokens = 0  # output tokens of the attempts with an end-to-end time
        self.timed_seconds = 0.0  # and their time
        self._hash = hashlib.sha256()

    def add(self, data: bytes, rows: list[dict[str, Any]]) -> None:
        self._hash.update(data)
        self.size += len(data)
        self.rows += len(rows)
        for row in rows:
            status = str(row.get("status"))
            self.by_status[status] = self.by_status.get(status, 0) + 1
            reached = row.get("route") != "/v1/models" and status != "rejected"
            for name in _TOKENS:
                value = row.get(name)
                if isinstance(value, int):
                    self.tokens[name] += value
                elif reached:  # a count the engine's answer did not carry is unavailable, never a silent zero
                    self.unavailable[name] = self.unavailable.get(name, 0) + 1
            out, e2e = row.get("output_tokens"), row.get("e2e_ms")
            if reached and isinstance(out, int) and isinstance(e2e, int | float) and not isinstance(e2e, bool):
                self.timed_output_tokens += out
                self.timed_seconds += float(e2e) / 1000.0

    @property
    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()


class EvidenceLog:
    def __init__(self, directory: Path, writer: BackgroundWriter, flush_after_s: float = 1.0) -> None:
        self.directory = directory
        self._writer = writer
        self._pending: dict[str, list[EvidenceSource]] = {}
        self._tallies: dict[str, RowTally] = {}
        self._flush_after = flush_after_s
        self._scheduled: asyncio.TimerHandle | None = None
        self.rows = 0
        self.failed: set[str] = set()  # bindings with a row write that failed (their ledger is not complete)

    def path_for(self, binding_id: str) -> Path:
        return self.directory / f"{binding_id}.requests.jsonl"

    def take_tally(self, binding_id: str) -> RowTally | None:
        """The tally of a binding's rows file, once its rows are all written (:meth:`flush`, then the writer's
        flush); the log forgets it. None when the binding wrote no row through this log."""
        return self._tallies.pop(binding_id, None)

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
            tally = self._tallies.get(binding_id)
            if tally is None:
                tally = self._tallies[binding_id] = RowTally()
            append = functools.partial(self._append, self.path_for(binding_id), tally, rows)
            if not self._writer.submit(WriteJob(append, functools.partial(self._failed, binding_id))):
                try:
                    append()
                except OSError:
                    self.failed.add(binding_id)

    @staticmethod
    def _append(path: Path, tally: RowTally, rows: list[EvidenceSource]) -> None:
        data, dicts = _encode_rows(rows)
        with tally.lock:
            write_private(WriteItem(path, data))
            tally.add(data, dicts)

    def _failed(self, binding_id: str, _: OSError) -> None:
        self.failed.add(binding_id)
