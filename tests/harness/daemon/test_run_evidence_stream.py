"""The end of a run reads its attempt rows in O(1): the gateway's tally of its rows file (rows, statuses,
tokens, sha256, size) is the ledger a full re-read would give, and the rows file becomes ``attempts.jsonl``
without a copy through memory."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.evidence import EvidenceLog
from gateway.writer import BackgroundWriter
from harness.daemon.engine_requests import ENGINE_REQUESTS, engine_request_figures, write_engine_requests
from harness.daemon.run_evidence import attempt_ledger, place_rows, tally_rows_file
from harness.run_ref import file_digest


@dataclass
class _Row:
    n: int

    def evidence_fields(self) -> dict[str, Any]:
        status = ("completed", "failed", "rejected")[self.n % 3]
        return {"request_id": f"r{self.n}", "status": status, "input_tokens": self.n, "output_tokens": None}


def test_the_gateways_tally_is_the_ledger_of_its_rows_file(tmp_path: Path) -> None:
    writer = BackgroundWriter(4)  # a small queue: some batches are written inline, in file order all the same
    log = EvidenceLog(tmp_path / "evidence", writer)
    for n in range(500):
        log.write("b1", _Row(n))
        if n % 7 == 0:
            log.flush()
    log.flush()
    assert writer.flush()
    tally = log.take_tally("b1")
    assert tally is not None and log.take_tally("b1") is None  # handed over once, then forgotten
    rows_file = log.path_for("b1")
    assert (tally.digest, tally.size) == file_digest(rows_file)
    assert attempt_ledger(tally, 500) == attempt_ledger(tally_rows_file(rows_file), 500)
    ledger = attempt_ledger(tally, 500)
    assert ledger.rows == 500 and ledger.by_status == {"completed": 167, "failed": 167, "rejected": 166}
    assert ledger.input_tokens == sum(range(500)) and ledger.output_tokens == 0
    attempts = tmp_path / "run" / "attempts.jsonl"
    attempts.parent.mkdir()
    place_rows(rows_file, attempts)
    assert os.stat(attempts).st_ino == os.stat(rows_file).st_ino and file_digest(attempts)[0] == tally.digest
    rows_file.unlink()
    place_rows(rows_file, attempts)  # a second pass with the gateway's file gone keeps the rows
    assert file_digest(attempts)[0] == tally.digest
    writer.close()


def _finished(rid: str, prompt: int) -> str:
    meta = {"prompt_tokens": prompt, "completion_tokens": 2, "e2e_latency": 0.5, "finish_reason": {"type": "length"}}
    record = {"event": "request.finished", "rid": rid, "out": {"meta_info": meta}}
    return f"[2026-12-03 17:00:00] {json.dumps(record)}\n"


def test_the_engine_join_reads_the_log_once_and_the_rows_as_a_stream(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("starting\n" + _finished("e1", 5) + _finished("other-run", 9) + _finished("e2", 6)[:30])
    found, offset = engine_request_figures(log, {"e1", "e2"})
    assert set(found) == {"e1"} and offset < log.stat().st_size  # the torn last line is left for the next read
    with log.open("a") as handle:
        handle.write(_finished("e2", 6)[30:])
    found, offset = engine_request_figures(log, {"e1", "e2"}, found, offset)
    assert set(found) == {"e1", "e2"} and offset == log.stat().st_size and found["e2"]["prompt_tokens"] == 6
    rows = tmp_path / "attempts.jsonl"
    lines = [{"request_id": "r1", "engine_rid": "e1", "status": "completed"},
             {"request_id": "r2", "engine_rid": None, "status": "rejected"},
             {"request_id": "r3", "engine_rid": "e2", "status": "completed"}]  # fmt: skip
    rows.write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = write_engine_requests(tmp_path, rows, log, wait_s=0.0)
    written = [json.loads(line) for line in (tmp_path / ENGINE_REQUESTS).read_text().splitlines()]
    assert [(j["request_id"], j["joined"]) for j in written] == [("r1", True), ("r2", False), ("r3", True)]
    assert (summary.joined, summary.unmatched) == (2, 1)
    assert summary.digest == file_digest(tmp_path / ENGINE_REQUESTS)[0]
