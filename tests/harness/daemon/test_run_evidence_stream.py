"""The end of a run reads its attempt rows in O(1): the gateway's tally of its rows file (rows, statuses,
tokens, sha256, size) is the ledger a full re-read would give, and the rows file becomes ``attempts.jsonl``
without a copy through memory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.evidence import EvidenceLog
from gateway.writer import BackgroundWriter
from harness.daemon.run_evidence import _ledger, _place_rows, _tally_file
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
    assert _ledger(tally, 500) == _ledger(_tally_file(rows_file), 500)
    ledger = _ledger(tally, 500)
    assert ledger.rows == 500 and ledger.by_status == {"completed": 167, "failed": 167, "rejected": 166}
    assert ledger.input_tokens == sum(range(500)) and ledger.output_tokens == 0
    attempts = tmp_path / "run" / "attempts.jsonl"
    attempts.parent.mkdir()
    _place_rows(rows_file, attempts)
    assert os.stat(attempts).st_ino == os.stat(rows_file).st_ino and file_digest(attempts)[0] == tally.digest
    rows_file.unlink()
    _place_rows(rows_file, attempts)  # a second pass with the gateway's file gone keeps the rows
    assert file_digest(attempts)[0] == tally.digest
    writer.close()
