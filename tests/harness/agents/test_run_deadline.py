"""``hitch run --deadline-s`` (issue 28 item 3): the deadline travels CLI → daemon → gateway binding, bounds the
run's requests, and ends the run with ``inference_deadline_exceeded``. Real daemon, real gateway, fake engine
process (it holds the marked request before its answer's head, so only the deadline can end it).
"""

from __future__ import annotations

import json

import pytest

from harness.contracts.events import RequestEvidenceV1
from harness.contracts.evidence import InferenceExecutionEvidenceV1
from harness.contracts.run import RunRecordV1
from tests.harness.daemon.conftest import FAST, as_json, hitch, inputs, leak_guard
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration
__all__ = ["inputs", "leak_guard"]

_MARK = "hold-this-request"


def test_a_run_past_its_deadline_fails_with_the_code_and_its_evidence_says_so(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    bad = hitch(root, "run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake",
                "--prompt", "hi", "--deadline-s", "-1", "--run-id", "bad-deadline", "--json")  # fmt: skip
    assert json.loads(bad.stdout)["error"]["code"] == "usage_error"
    assert not (root.runs / "bad-deadline").exists()  # refused before the run was admitted
    out = hitch(root, "run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake",
                "--prompt", _MARK, "--max-output-tokens", "8", "--deadline-s", "2", "--run-id", "late-1",
                "--fake-fault", f"slow_headers:t=600,match={_MARK}", "--json")  # fmt: skip
    assert json.loads(out.stdout)["error"]["code"] == "inference_deadline_exceeded"
    record = RunRecordV1.model_validate_json((root.runs / "late-1" / "run.json").read_text())
    assert record.status == "failed" and record.error is not None and record.error.code == "inference_deadline_exceeded"
    ev = root.runs / "late-1" / "inference"
    [row] = [RequestEvidenceV1.model_validate_json(line) for line in (ev / "attempts.jsonl").read_text().splitlines()]
    assert (row.status, row.error_code, row.abort_outcome) == ("failed", "inference_deadline_exceeded", "free")
    assert row.timeout_ms is not None and row.timeout_ms <= 2000 and row.deadline_left_ms == 2000
    execution = InferenceExecutionEvidenceV1.model_validate_json((ev / "execution.json").read_text())
    assert execution.binding.deadline_s == 2.0 and execution.complete
