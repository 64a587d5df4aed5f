"""No check passes on nothing: a check that measured 0 of what it measures records ``not_applicable``.

The recorder (:mod:`certify.recorder`) and the plugin's report hook (:func:`certify.results.record_report`) turn
a passed check that recorded ``not_applicable`` (or a measured count of 0) into the status ``not_applicable``;
the signed predicate (schema 4) carries it; an older entry's ``passed`` with ``details.not_applicable`` reads as
``not_applicable`` everywhere (:func:`harness.contracts.certification.check_status`).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from certify.evaluate import Platform, evaluate
from certify.recorder import EndRecorder, shown_status
from certify.registry import all_checks
from certify.results import record_report
from certify.state import CertifyState
from harness.contracts.certification import CertificationResultV1, check_status
from tests.catalog.support import make_predicate

LOOP = "agents.codex.real_tool_loop"


class _Item:
    def __init__(self) -> None:
        self.user_properties: list[tuple[str, Any]] = []


def _report(props: list[tuple[str, Any]], outcome: str = "passed") -> pytest.TestReport:
    return pytest.TestReport(
        f"certify/suites/x.py::{LOOP}",
        ("x.py", 1, LOOP),
        {},
        outcome,  # type: ignore[arg-type]
        None,
        "call",
        user_properties=[("certify_check", LOOP), *props],
    )


def _recorded(props: list[tuple[str, Any]], outcome: str = "passed") -> Any:
    state = CertifyState(is_worker=False, session_key="k")
    record_report(state, _report(props, outcome))
    return state.results[LOOP]


def test_a_check_that_measured_zero_round_trips_is_not_applicable_never_passed() -> None:
    from certify.recorder import Recorder

    item = _Item()
    recorder = Recorder(item)  # type: ignore[arg-type]  # a recorder needs only the item's user_properties
    recorder.measured("tool round trips", 0)
    result = _recorded(item.user_properties)
    assert result.status == "not_applicable" and result.status != "passed"
    assert result.details["measured"] == {"tool round trips": 0}
    assert result.details["not_applicable"] == "0 tool round trips: nothing of what this check measures"
    assert "reason" not in result.details  # the measured reason is the not_applicable one


def test_a_check_that_measured_something_passes_and_a_failed_one_stays_failed() -> None:
    from certify.recorder import Recorder

    item = _Item()
    recorder = Recorder(item)  # type: ignore[arg-type]
    recorder.measured("requests", 3)
    recorder.measured("tool round trips", 2)
    assert _recorded(item.user_properties).status == "passed"
    assert _recorded(item.user_properties).details["measured"] == {"requests": 3, "tool round trips": 2}
    recorder.not_applicable("0 requests reached the engine")
    assert _recorded(item.user_properties, "failed").status == "failed"  # a failure is never softened


def test_a_session_end_check_that_measured_nothing_is_not_applicable() -> None:
    end = EndRecorder()
    end.measured("samples", 0)
    assert shown_status("passed", end.details) == "not_applicable"
    assert shown_status("skipped", end.details) == "skipped"


def test_the_real_codex_loop_with_zero_round_trips_is_not_applicable_and_does_not_meet_the_gate() -> None:
    why = "the model made 0 tool round trips in 1 request(s) and left the file unchanged"
    from certify.evaluate import CheckResult

    declared = all_checks()
    results = {cid: CheckResult(cid, "passed") for cid, spec in declared.items() if spec.applies("sglang", "cpu")}
    loop = {"tool_round_trips": 0, "file_changed": False, "not_applicable": why}
    results[LOOP] = CheckResult(LOOP, "not_applicable", 10.0, loop)
    results["agents.harbor.real_model"] = CheckResult("agents.harbor.real_model", "passed", details={"rewards": {}})
    ev = evaluate(declared, results, Platform("sglang", "cpu", True, (), True, ()))
    assert ev.level == "provisional"  # the release gate is not met by a loop the model never drove
    assert any(r.startswith("not certified without a Codex run") and why in r for r in ev.reasons), ev.reasons
    row = next(c for c in ev.checks if c["id"] == LOOP)
    assert row["status"] == "not_applicable" and row["summary"] == f"not shown: {why}"


def test_schema_4_carries_not_applicable_and_older_schemas_refuse_it_but_read_their_own_as_it() -> None:
    row = {"id": LOOP, "status": "not_applicable", "required": False, "duration_s": 1.0, "details": {"not_applicable": "0"}}
    predicate = make_predicate() | {"schema_version": "4", "checks": [row]}
    assert CertificationResultV1.model_validate(predicate).checks[0].status == "not_applicable"
    with pytest.raises(ValidationError, match="since schema 4"):
        CertificationResultV1.model_validate(predicate | {"schema_version": "3"})
    legacy = {**row, "status": "passed"}  # how schema 3 recorded a check that could not show its behaviour
    assert CertificationResultV1.model_validate(make_predicate() | {"checks": [legacy]}).checks[0].status == "passed"
    assert check_status(legacy) == "not_applicable" and check_status({**legacy, "details": {}}) == "passed"
