"""The engine's own per-request figures, joined to a run's attempt rows by request id (seed 004).

SGLang started with ``--log-requests --log-requests-level 0 --log-requests-format json`` (:mod:`harness.engine.argv`)
prints one line per finished request on its output, which the launcher keeps in the service's ``engine.log``::

    [2026-12-03 17:00:00] {"timestamp": ..., "event": "request.finished", "rid": RID, "obj": {...}, "out": {"meta_info": {...}}}

``meta_info`` is the engine's account of that request: its prompt, cached, output and reasoning tokens, its
end-to-end and first-token latency and (with metrics on) when it was received, entered the forward pass, finished
prefill and finished. :func:`write_engine_requests` reads the lines of this run's engine request ids (the
gateway's rows name them: ``engine_rid``), writes ``engine-requests.jsonl`` (one row per attempt: the gateway's
request id, the engine's, whether it joined, and the engine's figures) and returns its summary
(:class:`EngineRequestsV1`). A physical request is attributed by its id, never by a time window: a shared
engine's global ``/metrics`` cannot say which run a request belonged to.

An engine writes its line as the request ends, and the launcher copies it to ``engine.log`` a moment later: the
join waits (at most :data:`JOIN_WAIT_S`) for the lines of the attempts that reached an answer. Attempts the engine
never answered (refused by the gateway) have no engine id and are counted ``unmatched``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.contracts.evidence import EngineRequestsV1

__all__ = [
    "ANSWERED",
    "ENGINE_REQUESTS",
    "JOIN_WAIT_S",
    "PARTIAL",
    "engine_request_figures",
    "figures_of_line",
    "line_rid",
    "row_of",
    "write_engine_requests",
]

ENGINE_REQUESTS = "engine-requests.jsonl"
PARTIAL = ENGINE_REQUESTS + ".partial"  # a live join's file until the run's end (harness.daemon.engine_join)
JOIN_WAIT_S = 10.0
_MARKER = '"event": "request.finished"'
_TOKENS = ("prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens")
_SECONDS = ("e2e_latency", "first_token_latency", "decode_throughput")
_STAMPS = ("request_received_ts", "forward_entry_time", "prefill_finished_time", "request_finished_ts")
ANSWERED = frozenset({"completed", "incomplete"})
_MARKER_B = _MARKER.encode()
_RID = re.compile(rb'"rid": ?"([^"\\]*)"')
# the gateway writes a row's first fields in this order (gateway.transport.Exchange.evidence_fields)
_HEAD = re.compile(rb'^\{"schema_version":"1","request_id":"([^"\\]*)","engine_rid":(null|"([^"\\]*)"),')
_STATUS = re.compile(rb',"status":"([a-z]+)",')


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _figures(meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: meta[k] for k in (*_TOKENS, *_SECONDS, *_STAMPS) if _number(meta.get(k))}
    finish = meta.get("finish_reason")
    out["finish"] = finish.get("type") if isinstance(finish, dict) else finish
    received, entered = meta.get("request_received_ts"), meta.get("forward_entry_time")
    if isinstance(received, int | float) and isinstance(entered, int | float):
        out["queue_s"] = float(entered) - float(received)  # waiting for a slot in the engine's own scheduler
    return out


def line_rid(raw: bytes) -> str | None:
    """The engine request id of a ``request.finished`` line of the log (None: any other line)."""
    if _MARKER_B not in raw:
        return None
    named = _RID.search(raw)
    return None if named is None else named.group(1).decode("utf-8", errors="replace")


def figures_of_line(raw: bytes) -> dict[str, Any] | None:
    """The engine's figures of one ``request.finished`` line (None: not such a line, or not readable)."""
    line = raw.decode("utf-8", errors="replace")
    try:
        record = json.loads(line[line.find("{") :])
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("event") != "request.finished":
        return None
    meta = (record.get("out") or {}).get("meta_info")
    return _figures(meta) if isinstance(meta, dict) else None


def engine_request_figures(
    log: Path, rids: set[str], found: dict[str, dict[str, Any]] | None = None, offset: int = 0
) -> tuple[dict[str, dict[str, Any]], int]:
    """rid -> the engine's figures, from the ``request.finished`` lines of ``log`` for the ids in ``rids``, read from
    byte ``offset`` on into ``found``; returns them with the offset after the last whole line read (a later call
    goes on from there instead of reading the log again)."""
    found = {} if found is None else found
    try:
        handle = log.open("rb")
    except OSError:
        return found, offset
    with handle:
        handle.seek(offset)
        for raw in handle:
            if not raw.endswith(b"\n"):
                break  # a line still being written: read again next time
            offset += len(raw)
            rid = line_rid(raw)
            if rid is None or rid not in rids:
                continue  # another run's request: never parsed
            figures = figures_of_line(raw)
            if figures is not None:
                found[rid] = figures
    return found, offset


def row_of(line: bytes) -> tuple[str | None, str | None, str | None] | None:
    """(request id, engine rid, status) of one row: from the gateway's fixed field order when the line has it, else
    parsed whole; None for a line that is not a row (a torn last line: the writer's own verdict covers it)."""
    head, status = _HEAD.search(line), _STATUS.search(line)
    if head is not None and status is not None:
        rid = head.group(3)
        return head.group(1).decode(), None if rid is None else rid.decode(), status.group(1).decode()
    try:
        row = json.loads(line) if line.strip() else None
    except ValueError:
        return None
    if not isinstance(row, dict):
        return None
    rid = row.get("engine_rid")
    return row.get("request_id"), None if rid is None else str(rid), row.get("status")


def _rows(rows_file: Path) -> Iterator[tuple[str | None, str | None, str | None]]:
    """The rows of ``rows_file``, read as a stream (:func:`row_of`)."""
    with rows_file.open("rb") as lines:
        for line in lines:
            row = row_of(line)
            if row is not None:
                yield row


def write_engine_requests(out_dir: Path, rows_file: Path, log: Path, *, wait_s: float = JOIN_WAIT_S) -> EngineRequestsV1:
    """``engine-requests.jsonl`` of a run's attempt rows (``rows_file``, read as a stream) joined with ``log`` (see
    the module docstring); memory holds the engine ids and the engine's figures, never the rows."""
    rids: set[str] = set()
    awaited: set[str] = set()
    for _, rid, status in _rows(rows_file):
        if rid:
            rids.add(rid)
            if status in ANSWERED:
                awaited.add(rid)
    end = time.monotonic() + wait_s
    figures, offset = engine_request_figures(log, rids)
    while not awaited <= figures.keys() and time.monotonic() < end:
        time.sleep(0.1)
        figures, offset = engine_request_figures(log, rids, figures, offset)
    target = out_dir / ENGINE_REQUESTS
    tmp = target.with_name(target.name + ".tmp")
    digest = hashlib.sha256()
    matched = total = 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        for request_id, rid, _ in _rows(rows_file):
            joined = {"request_id": request_id, "engine_rid": rid, "joined": rid in figures,
                      "engine": figures.get(str(rid))}  # fmt: skip
            line = (json.dumps(joined, separators=(",", ":"), sort_keys=True) + "\n").encode()
            handle.write(line)
            digest.update(line)
            total += 1
            matched += joined["joined"] is True
    os.replace(tmp, target)
    (out_dir / PARTIAL).unlink(missing_ok=True)  # a live join's, when this pass replaced it
    return EngineRequestsV1(
        file=ENGINE_REQUESTS, digest="sha256:" + digest.hexdigest(), joined=matched, unmatched=total - matched
    )
