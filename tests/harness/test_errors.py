"""The one error table: spec §12.2 codes present, input errors exit 2, every code used exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.errors import ERROR_TABLE, HitchError

SPEC_CODES = {
    "local_model_not_found",
    "inference_lock_mismatch",
    "local_model_integrity_failed",
    "inference_runtime_integrity_failed",
    "inference_runtime_unavailable",
    "inference_device_unsupported",
    "inference_harness_unsupported",
    "inference_protocol_unsupported",
    "inference_parameter_conflict",
    "inference_modality_unsupported",
    "inference_capacity_exceeded",
    "inference_queue_timeout",
    "inference_start_timeout",
    "inference_oom",
    "inference_process_exited",
    "inference_context_exceeded",
    "inference_binding_revoked",
    "inference_route_unavailable",
    "inference_capture_incomplete",
    "local_inference_topology_unsupported",
    "inference_recovery_ambiguous",
    "inference_in_use",
}

REPO = Path(__file__).resolve().parents[2]


def test_every_spec_code_is_in_the_table() -> None:
    assert set(ERROR_TABLE) >= SPEC_CODES


@pytest.mark.parametrize("code", sorted(ERROR_TABLE))
def test_input_like_codes_exit_2_and_others_do_not(code: str) -> None:
    spec = ERROR_TABLE[code]
    if spec.category in {"input", "request", "context"}:
        assert spec.exit_code == 2
    else:
        assert spec.exit_code not in (0, 2)
    assert 400 <= spec.http_status < 600


def test_json_and_human_come_from_the_same_object() -> None:
    err = HitchError("local_model_not_found", "no model local/x", {"ref": "local/x"})
    data = err.to_dict()
    assert data["code"] == "local_model_not_found"
    assert data["category"] == "input" and data["retryable"] is False
    human = err.human()
    assert human.startswith("error[local_model_not_found]: no model local/x")
    assert "ref: local/x" in human and data["hint"] in human
    assert err.exit_code == 2


def test_unknown_code_is_a_programming_error() -> None:
    with pytest.raises(KeyError):
        HitchError("no_such_code", "x")


def test_every_code_raised_in_the_code_base_is_in_the_table() -> None:
    pattern = re.compile(r'HitchError\(\s*"([a-z_]+)"')
    used: set[str] = set()
    for folder in ("harness", "gateway", "certify", "catalog", "reports", "fixtures"):
        for path in (REPO / folder).rglob("*.py"):
            used.update(pattern.findall(path.read_text()))
    assert used, "the scan found no HitchError uses"
    assert used - set(ERROR_TABLE) == set()


def test_human_details_are_readable_lines_never_python_reprs() -> None:
    err = HitchError(
        "usage_error",
        "bad",
        {"choices": ["auto", "cpu"], "problems": [{"loc": "engine", "msg": "x"}], "where": {"a": 1, "b": None}},
    )
    assert err.human().splitlines() == [
        "error[usage_error]: bad",
        "  choices: auto, cpu",
        "  problems:",
        "    - loc: engine, msg: x",
        "  where:",
        "    a: 1",
        "    b: -",
        "  hint: see --help",
    ]
