"""The evaluator decides the level from declared checks and what ran (DESIGN §6); nothing else can."""

from __future__ import annotations

import pytest

from certify.evaluate import CheckResult, Platform, evaluate
from certify.registry import Check, all_checks

FAKE, CUDA = frozenset({"fake"}), frozenset({"cuda"})
DECLARED = {
    c.id: c
    for c in [
        Check("protocol.chat.basic"),
        Check("faults.fake.crash", engines=FAKE),
        Check("hardware.cuda.gpu", devices=CUDA),
        Check("perf.optional", required=False),
    ]
}


def _platform(engine: str = "sglang", *, platform_ok: bool = True, runtime_ok: bool = True, error: str | None = None) -> Platform:
    return Platform(
        engine,
        "cpu",
        platform_ok,
        () if platform_ok else ("CPU lacks AMX",),
        runtime_ok,
        () if runtime_ok else ("unpinned",),
        error,
    )


def _results(**statuses: str) -> dict[str, CheckResult]:
    return {cid.replace("__", "."): CheckResult(cid.replace("__", "."), s) for cid, s in statuses.items()}  # type: ignore[arg-type]


def test_all_required_passed_on_a_certifiable_platform_is_certified() -> None:
    ev = evaluate(DECLARED, _results(protocol__chat__basic="passed"), _platform())
    assert ev.level == "certified"
    assert [row["id"] for row in ev.checks] == ["perf.optional", "protocol.chat.basic"]
    assert ev.checks[0]["status"] == "not_run" and ev.checks[0]["required"] is False


@pytest.mark.parametrize("status", ["failed", "skipped", "not_run"])
def test_a_required_check_that_did_not_pass_fails_the_run(status: str) -> None:
    results = {} if status == "not_run" else _results(protocol__chat__basic=status)
    ev = evaluate(DECLARED, results, _platform())
    assert ev.level == "failed"
    assert f"protocol.chat.basic: required check {status}" in ev.reasons


def test_platform_or_runtime_not_certifiable_is_provisional_with_reasons() -> None:
    ev = evaluate(DECLARED, _results(protocol__chat__basic="passed"), _platform(platform_ok=False))
    assert ev.level == "provisional" and "CPU lacks AMX" in ev.reasons
    ev = evaluate(DECLARED, _results(protocol__chat__basic="passed"), _platform(runtime_ok=False))
    assert ev.level == "provisional" and "unpinned" in ev.reasons


def test_fake_engine_reaches_contract_only_and_needs_its_fake_only_checks() -> None:
    passed = _results(protocol__chat__basic="passed", faults__fake__crash="passed")
    assert evaluate(DECLARED, passed, _platform("fake")).level == "contract"
    assert evaluate(DECLARED, _results(protocol__chat__basic="passed"), _platform("fake")).level == "failed"
    # a fake-only check is not required of a real engine
    assert evaluate(DECLARED, _results(protocol__chat__basic="passed"), _platform("sglang")).level == "certified"


def test_optional_check_failure_is_reported_but_does_not_fail() -> None:
    ev = evaluate(DECLARED, _results(protocol__chat__basic="passed", perf__optional="failed"), _platform())
    assert ev.level == "certified" and "perf.optional: optional check failed" in ev.reasons


def test_undeclared_result_and_session_error_fail() -> None:
    ev = evaluate(DECLARED, _results(protocol__chat__basic="passed", protocol__ghost="passed"), _platform())
    assert ev.level == "failed" and any("not declared" in r for r in ev.reasons)
    ev = evaluate(DECLARED, _results(protocol__chat__basic="passed"), _platform(error="engine never started"))
    assert ev.level == "failed"


def test_merge_keeps_the_worse_status() -> None:
    merged = CheckResult("x.y", "passed", 1.0).merge(CheckResult("x.y", "failed", 2.0, {"reason": "boom"}))
    assert (merged.status, merged.duration_s, merged.details) == ("failed", 3.0, {"reason": "boom"})


def test_check_ids_need_a_suite_prefix_and_suites_declare_unique_ids() -> None:
    with pytest.raises(ValueError):
        Check("nosuite")
    with pytest.raises(ValueError):
        Check("bogus.thing")
    declared = all_checks()
    assert declared and all(cid.split(".", 1)[0] == c.suite for cid, c in declared.items())


def test_a_check_not_applicable_to_the_model_passes_and_is_named_in_the_reasons() -> None:
    why = "random weights: the end-of-turn token is never chosen"
    results = {"protocol.chat.basic": CheckResult("protocol.chat.basic", "passed", details={"not_applicable": why})}
    ev = evaluate(DECLARED, results, _platform())
    assert ev.level == "certified"
    assert f"protocol.chat.basic: not applicable to this model: {why}" in ev.reasons
    assert next(c for c in ev.checks if c["id"] == "protocol.chat.basic")["details"] == {"not_applicable": why}
    # a failed check stays failed whatever it says about applicability
    results["protocol.chat.basic"] = CheckResult("protocol.chat.basic", "failed", details={"not_applicable": why})
    assert evaluate(DECLARED, results, _platform()).level == "failed"
