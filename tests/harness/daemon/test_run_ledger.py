"""The run's attempt ledger (seed 004): totals are the rows' own; a count an attempt that reached the engine
does not carry is marked ``unavailable`` (never a silent zero), a failed attempt's tokens count like any
other's, and the run's output tokens per second is derived from the rows that carry both figures."""

from __future__ import annotations

import json
from typing import Any

from gateway.evidence import RowTally
from harness.contracts.evidence import AttemptLedgerV1
from harness.daemon.run_evidence import attempt_ledger


def _row(status: str, route: str = "/v1/responses", **counts: Any) -> dict[str, Any]:
    base = {"route": route, "status": status, "input_tokens": None, "cached_tokens": None, "output_tokens": None,
            "reasoning_tokens": None, "e2e_ms": None}  # fmt: skip
    return {**base, **counts}


def _ledger_of(rows: list[dict[str, Any]]) -> AttemptLedgerV1:
    tally = RowTally()  # as the gateway counts its rows while it appends them
    for row in rows:
        tally.add(json.dumps(row).encode() + b"\n", [row])
    return attempt_ledger(tally, begun=len(rows))


FULL = {"input_tokens": 10, "cached_tokens": 0, "output_tokens": 8, "reasoning_tokens": 0, "e2e_ms": 2000.0}


def test_a_failed_attempts_tokens_are_counted() -> None:
    """An attempt that failed after the engine reported its usage (a stream cut after its last usage, an in-band
    error) cost those tokens: the totals include them."""
    ledger = _ledger_of([_row("completed", **FULL), _row("failed", **{**FULL, "output_tokens": 5, "e2e_ms": 1000.0})])
    assert (ledger.input_tokens, ledger.output_tokens) == (20, 13)
    assert ledger.by_status == {"completed": 1, "failed": 1} and ledger.unavailable == {}


def test_a_missing_count_is_marked_unavailable_not_dropped() -> None:
    cut = _row("failed", e2e_ms=500.0)  # the engine's usage never arrived
    listing = _row("completed", route="/v1/models")  # no tokens by nature
    refused = _row("rejected")  # never reached the engine
    ledger = _ledger_of([_row("completed", **FULL), cut, listing, refused])
    assert ledger.input_tokens == 10 and ledger.output_tokens == 8
    assert ledger.unavailable == {"input_tokens": 1, "cached_tokens": 1, "output_tokens": 1, "reasoning_tokens": 1}
    only_cached = _ledger_of([_row("completed", **{**FULL, "cached_tokens": None})])
    assert only_cached.unavailable == {"cached_tokens": 1}


def test_tokens_per_second_is_the_runs_output_over_its_attempts_time() -> None:
    ledger = _ledger_of([_row("completed", **FULL), _row("completed", **{**FULL, "output_tokens": 4, "e2e_ms": 1000.0})])
    assert ledger.output_tokens_per_s == 4.0  # 12 tokens in 3 s of attempts
    assert _ledger_of([_row("rejected")]).output_tokens_per_s is None
    assert _ledger_of([]).output_tokens_per_s is None


def test_an_older_ledger_without_the_new_fields_loads() -> None:
    old = {"file": "attempts.jsonl", "digest": "sha256:" + "0" * 64, "rows": 0, "begun": 0, "by_status": {},
           "input_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0}  # fmt: skip
    loaded = AttemptLedgerV1.model_validate(old)
    assert loaded.unavailable == {} and loaded.output_tokens_per_s is None
