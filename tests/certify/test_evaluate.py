"""The evaluator decides the level from declared checks and what ran (DESIGN §6); nothing else can."""

from __future__ import annotations

import pytest

from certify.evaluate import CheckResult, Platform, evaluate
from certify.registry import Check, all_checks

FAKE, CUDA, REAL = frozenset({"fake"}), frozenset({"cuda"}), frozenset({"sglang"})
LOOP, HARBOR = "agents.codex.real_tool_loop", "agents.harbor.real_model"  # the release gate (certify.gate)
DECLARED = {
    c.id: c
    for c in [
        Check("protocol.chat.basic", summary="{chunks} chunks", description="a chat answer streams"),
        Check("faults.fake.crash", engines=FAKE),
        Check("hardware.cuda.gpu", devices=CUDA),
        Check("perf.optional", required=False),
        Check(LOOP, required=False, engines=REAL),
        Check(HARBOR, required=False, engines=REAL),
    ]
}
LOOP_SHOWN = {"tool_round_trips": 2, "file_changed": True}


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


def _results(gate: bool = True, **statuses: str) -> dict[str, CheckResult]:
    """Results of the given statuses; with ``gate`` also the release gate's checks, passed and shown."""
    out = {cid.replace("__", "."): CheckResult(cid.replace("__", "."), s) for cid, s in statuses.items()}  # type: ignore[arg-type]
    if gate:
        out |= {LOOP: CheckResult(LOOP, "passed", details=dict(LOOP_SHOWN)), HARBOR: CheckResult(HARBOR, "passed")}
    return out


def test_all_required_passed_on_a_certifiable_platform_is_certified() -> None:
    ev = evaluate(DECLARED, _results(protocol__chat__basic="passed"), _platform())
    assert ev.level == "certified" and ev.to_certify == []
    assert [row["id"] for row in ev.checks] == [LOOP, HARBOR, "perf.optional", "protocol.chat.basic"]
    assert ev.checks[2]["status"] == "not_run" and ev.checks[2]["required"] is False


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
    passed = _results(False, protocol__chat__basic="passed", faults__fake__crash="passed")
    assert evaluate(DECLARED, passed, _platform("fake")).level == "contract"
    assert evaluate(DECLARED, _results(False, protocol__chat__basic="passed"), _platform("fake")).level == "failed"
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


def test_a_check_not_applicable_is_never_a_pass_and_keeps_a_real_engine_from_certified() -> None:
    why = "random weights: the end-of-turn token is never chosen"
    na = CheckResult("protocol.chat.basic", "not_applicable", details={"not_applicable": why})
    results = _results() | {"protocol.chat.basic": na}
    ev = evaluate(DECLARED, results, _platform())
    assert ev.level == "provisional"  # certifiable platform and runtime: only the check keeps it from certified
    assert f"protocol.chat.basic: not applicable (required): {why}" in ev.reasons
    assert "not certified while a required check is not applicable: protocol.chat.basic" in ev.reasons
    row = next(c for c in ev.checks if c["id"] == "protocol.chat.basic")
    assert row["status"] == "not_applicable" and row["summary"] == f"not shown: {why}"
    assert any("protocol.chat.basic" in a for a in ev.to_certify)
    # on the fake engine it fails nothing, and is named
    fake = results | {"faults.fake.crash": CheckResult("faults.fake.crash", "passed")}
    assert evaluate(DECLARED, fake, _platform(engine="fake")).level == "contract"
    # a failed check stays failed whatever it says about applicability
    results["protocol.chat.basic"] = CheckResult("protocol.chat.basic", "failed", details={"not_applicable": why})
    assert evaluate(DECLARED, results, _platform()).level == "failed"


def test_two_results_of_one_check_merge_to_not_applicable_over_passed_and_under_skipped() -> None:
    passed, na, skipped = (CheckResult("protocol.chat.basic", s) for s in ("passed", "not_applicable", "skipped"))
    assert passed.merge(na).status == "not_applicable" and na.merge(passed).status == "not_applicable"
    assert na.merge(skipped).status == "skipped"


# -- the release gate (certify.gate) and the rows' sentences -------------------------------------------


def _gate_unmet(results: dict[str, CheckResult], platform: Platform | None = None) -> tuple[str, list[str], list[str]]:
    ev = evaluate(DECLARED, results, platform or _platform())
    return ev.level, [r for r in ev.reasons if r.startswith("not certified without")], ev.to_certify


@pytest.mark.parametrize(
    ("loop", "why"),
    [
        (None, "agents.codex.real_tool_loop did not run"),
        (CheckResult(LOOP, "skipped", details={"reason": "Codex not installed: no binary"}),
         "agents.codex.real_tool_loop skipped: Codex not installed: no binary"),
        (CheckResult(LOOP, "passed", details={"tool_round_trips": 1, "file_changed": False}),
         "the model made 1 tool round trip(s) and left the file unchanged"),
        (CheckResult(LOOP, "passed", details={"tool_round_trips": 3, "file_changed": False}),
         "the model made 3 tool round trip(s) and left the file unchanged"),
        (CheckResult(LOOP, "not_applicable", details={"tool_round_trips": 0, "not_applicable": "135M parameters: no tool use"}),
         "the model cannot: 135M parameters: no tool use"),
    ],
    ids=["not-run", "skipped", "one-round-trip", "file-unchanged", "model-cannot"],
)  # fmt: skip
def test_without_a_real_engine_codex_loop_that_changed_a_file_the_level_is_provisional(
    loop: CheckResult | None, why: str
) -> None:
    results = _results(protocol__chat__basic="passed")
    if loop is None:
        del results[LOOP]
    else:
        results[LOOP] = loop
    level, gate, actions = _gate_unmet(results)
    assert level == "provisional"
    assert gate == [
        "not certified without a Codex run on the real engine whose model makes at least 2 tool round trips and "
        f"changes a file: {why}"
    ]
    assert any("Codex's tool loop" in a for a in actions)


def test_without_harbor_trials_on_the_real_engine_the_level_is_provisional() -> None:
    results = _results(protocol__chat__basic="passed")
    results[HARBOR] = CheckResult(HARBOR, "skipped", details={"reason": "Harbor is not installed"})
    level, gate, actions = _gate_unmet(results)
    assert level == "provisional"
    assert gate == [
        "not certified without Harbor trials on the real engine: agents.harbor.real_model skipped: Harbor is not installed"
    ]
    assert actions == ["run with Docker and Harbor present (make setup installs Harbor and builds its trial image)"]


def test_a_gate_check_that_is_not_declared_holds_the_level_back() -> None:
    declared = {cid: c for cid, c in DECLARED.items() if cid != LOOP}
    ev = evaluate(declared, {k: v for k, v in _results(protocol__chat__basic="passed").items() if k != LOOP}, _platform())
    assert ev.level == "provisional"
    assert any(r.endswith("it is not declared for this engine and device") for r in ev.reasons)


def test_an_uncertifiable_platform_and_an_unmet_gate_are_both_said_with_their_actions() -> None:
    results = _results(protocol__chat__basic="passed")
    results[LOOP] = CheckResult(LOOP, "passed", details={"tool_round_trips": 0, "file_changed": False})
    platform = Platform("sglang", "cpu", False, ("CPU lacks AMX (amx_tile): the SGLang CPU engine needs Intel AMX",), True, ())
    ev = evaluate(DECLARED, results, platform)
    assert ev.level == "provisional"
    limits = [r for r in ev.reasons if not r.startswith("perf.optional")]
    assert limits[0].startswith("CPU lacks AMX") and limits[1].startswith("not certified without a Codex run")
    assert ev.to_certify[0].startswith("run on an x86_64 CPU with Intel AMX") and "Codex's tool loop" in ev.to_certify[1]


def test_each_row_says_in_a_sentence_what_a_pass_showed_or_why_it_did_not_pass() -> None:
    results = _results(protocol__chat__basic="passed", perf__optional="failed")
    results["protocol.chat.basic"].details["chunks"] = 4
    results["perf.optional"].details["reason"] = "E       AssertionError: the gateway added 40 ms\nE  more"
    rows = {r["id"]: r for r in evaluate(DECLARED, results, _platform()).checks}
    assert rows["protocol.chat.basic"]["summary"] == "4 chunks"
    assert rows["perf.optional"]["summary"] == "failed: AssertionError: the gateway added 40 ms"
    # details of another shape: the template cannot fill in, the description says it
    results["protocol.chat.basic"] = CheckResult("protocol.chat.basic", "passed", details={"other": 1})
    rows = {r["id"]: r for r in evaluate(DECLARED, results, _platform()).checks}
    assert rows["protocol.chat.basic"]["summary"] == "a chat answer streams"
