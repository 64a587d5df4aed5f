"""Spec §14: execution evidence written under an earlier schema stays readable (files kept in ``tests/data``).

``execution-evidence-schema1.json`` is the shape the first writer produced (before the attempt ledger);
``execution-evidence-schema2.json`` a real file of a fake-engine run written before the model identity existed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.contracts.evidence import ExecutionEvidenceSchema1, InferenceExecutionEvidenceV1, parse_execution_evidence

DATA = Path(__file__).resolve().parents[2] / "data"


def test_a_schema_1_file_is_read_as_schema_1() -> None:
    raw = (DATA / "execution-evidence-schema1.json").read_bytes()
    ev = parse_execution_evidence(raw)
    assert isinstance(ev, ExecutionEvidenceSchema1)
    assert ev.schema_version == "1" and ev.requests == 1 and ev.hardware.device == "cpu" and ev.cache_condition == "cold"
    assert parse_execution_evidence(json.loads(raw)) == ev
    with pytest.raises(ValidationError):  # the current record does not pretend to read it
        InferenceExecutionEvidenceV1.model_validate_json(raw)


def test_a_schema_2_file_without_the_newer_fields_reads_as_the_current_record() -> None:
    ev = parse_execution_evidence((DATA / "execution-evidence-schema2.json").read_bytes())
    assert isinstance(ev, InferenceExecutionEvidenceV1)
    assert ev.model_identity is None and ev.engine_requests is None
    assert ev.requests == ev.attempts.rows == 1 and ev.complete


def test_an_unknown_schema_version_is_refused() -> None:
    data = json.loads((DATA / "execution-evidence-schema1.json").read_text())
    with pytest.raises(ValidationError):
        parse_execution_evidence({**data, "schema_version": "9"})
