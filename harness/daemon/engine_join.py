"""The engine's per-request figures joined to a live run's rows as they come, so a run's end is O(1) (spec §12.1).

:func:`harness.daemon.engine_requests.write_engine_requests` joins a run's rows to the engine's ``request.finished``
lines in one pass at the run's end: two reads of the rows and one of the whole engine log, so an eight-hour run
(a million rows, a gigabyte of each) took tens of seconds to end. :class:`EngineJoin` does the same join while
the run lives: every :data:`INTERVAL_S` the daemon hands it what was appended since (rows from the gateway's rows
file, lines from the service's ``engine.log`` from where the run began) and it appends the joined rows to
``engine-requests.jsonl.partial`` with a running digest; :meth:`EngineJoin.finish` reads the last seconds, waits
(at most ``wait_s``) for the lines of answered attempts, and renames the file. The rows it writes, their order and
their digest are exactly what the one-pass join writes for the same files.

A row is written in order once its line has come, or at once when it has no engine id, or as ``unmatched`` after
``window_s`` without one (the one-pass join's wait). Memory holds the rows not yet written and the lines not yet
claimed (another run's on a shared engine are dropped after :data:`KEEP_LINES_S`), never the run's history.

Example::

    join = EngineJoin(rows_file, service_dir / ENGINE_LOG, run_dir)   # at bind: the log read from its end
    join.advance()                                                      # every few seconds, in a thread
    summary = join.finish(rows_file=run_dir / "attempts.jsonl")         # the run's end: the last stretch only
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.contracts.evidence import EngineRequestsV1
from harness.daemon.engine_requests import (
    ANSWERED,
    ENGINE_REQUESTS,
    JOIN_WAIT_S,
    PARTIAL,
    figures_of_line,
    line_rid,
    row_of,
)

__all__ = ["INTERVAL_S", "KEEP_LINES_S", "EngineJoin"]

INTERVAL_S = 2.0
KEEP_LINES_S = 60.0  # an engine line no row of this run claimed (another run's request) is dropped after this


@dataclass
class _Row:
    request_id: str | None
    rid: str | None
    status: str | None
    seen_at: float


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class EngineJoin:
    """One live run's join of its rows to the engine's request lines (thread-safe: one pass at a time)."""

    def __init__(
        self,
        rows_file: Path,
        log: Path,
        out_dir: Path,
        *,
        window_s: float = JOIN_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rows_file = rows_file
        self.log = log
        self.window_s = window_s
        self._clock = clock
        self._target = out_dir / ENGINE_REQUESTS
        self._partial = out_dir / PARTIAL
        self.rows_offset = 0
        self.log_offset = _size(log)  # this run's requests are logged after it began
        self._pending: deque[_Row] = deque()
        self._lines: dict[str, tuple[bytes, float]] = {}
        self._digest = hashlib.sha256()
        self.written = self.matched = 0
        self._guard = threading.Lock()
        self._closed = False
        fd = os.open(self._partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self._out = os.fdopen(fd, "wb")
        self._task: asyncio.Task[None] | None = None

    def start(self, interval_s: float = INTERVAL_S) -> None:
        """Advance every ``interval_s`` on the running loop (the reading in a thread) until :meth:`stop`."""
        self._task = asyncio.ensure_future(self._loop(interval_s))

    async def stop(self) -> None:
        """No more passes on the loop; a pass already in its thread ends before :meth:`finish` takes its turn."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.advance)

    def advance(self, rows_file: Path | None = None) -> None:
        """Take in what was appended to the rows and the log since the last pass, and write the rows now decided."""
        with self._guard:
            if not self._closed:
                self._advance(rows_file or self.rows_file, final=False)

    def finish(self, rows_file: Path | None = None, wait_s: float = JOIN_WAIT_S) -> EngineRequestsV1:
        """The run's end: the last rows and lines, a wait of at most ``wait_s`` for the lines of answered attempts,
        the rest ``unmatched``; ``engine-requests.jsonl`` in place and its summary."""
        source = rows_file or self.rows_file
        with self._guard:
            end = self._clock() + wait_s
            self._advance(source, final=False)
            while self._awaiting() and self._clock() < end:
                time.sleep(0.1)
                self._advance(source, final=False)
            self._advance(source, final=True)
            self._out.close()
            self._closed = True
            os.replace(self._partial, self._target)
            return EngineRequestsV1(
                file=ENGINE_REQUESTS,
                digest="sha256:" + self._digest.hexdigest(),
                joined=self.matched,
                unmatched=self.written - self.matched,
            )

    def abandon(self) -> None:
        """A run whose evidence is written another way (the one-pass join): the partial file goes."""
        with self._guard:
            if not self._closed:
                self._out.close()
                self._closed = True
            self._partial.unlink(missing_ok=True)

    @property
    def held_lines(self) -> int:
        """Engine lines read and not yet claimed by a row (bounded by :data:`KEEP_LINES_S` of the engine's rate)."""
        return len(self._lines)

    def _awaiting(self) -> bool:
        return any(r.rid is not None and r.status in ANSWERED and r.rid not in self._lines for r in self._pending)

    def _advance(self, rows_file: Path, *, final: bool) -> None:
        now = self._clock()
        self._read_rows(rows_file, now)
        self._read_log(now)
        self._flush(now, final=final)
        self._out.flush()
        horizon = now - max(KEEP_LINES_S, self.window_s)  # lines no row claimed by then: another run's
        self._lines = {rid: kept for rid, kept in self._lines.items() if kept[1] >= horizon}

    def _read_rows(self, rows_file: Path, now: float) -> None:
        try:
            handle = rows_file.open("rb")
        except OSError:
            return
        with handle:
            handle.seek(self.rows_offset)
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break  # a row still being written: read again next pass
                self.rows_offset += len(raw)
                row = row_of(raw)
                if row is not None:
                    self._pending.append(_Row(*row, seen_at=now))

    def _read_log(self, now: float) -> None:
        if _size(self.log) < self.log_offset:  # a new log (the service's next epoch): from its start
            self.log_offset = 0
        try:
            handle = self.log.open("rb")
        except OSError:
            return
        with handle:
            handle.seek(self.log_offset)
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                self.log_offset += len(raw)
                rid = line_rid(raw)
                if rid is not None:
                    self._lines[rid] = (raw, now)

    def _flush(self, now: float, *, final: bool) -> None:
        while self._pending:
            head = self._pending[0]
            kept = self._lines.pop(head.rid, None) if head.rid is not None else None
            figures = figures_of_line(kept[0]) if kept is not None else None
            if figures is None and head.rid is not None and not final and now - head.seen_at < self.window_s:
                return  # its line may still come
            self._pending.popleft()
            joined = {"request_id": head.request_id, "engine_rid": head.rid, "joined": figures is not None,
                      "engine": figures}  # fmt: skip
            line = (json.dumps(joined, separators=(",", ":"), sort_keys=True) + "\n").encode()
            self._out.write(line)
            self._digest.update(line)
            self.written += 1
            self.matched += figures is not None
