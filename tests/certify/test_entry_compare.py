"""certify.entry_compare: what ``hitch catalog reproduce`` calls a difference (hermetic, predicates as data)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from certify.entry_compare import check_changes, compare_entries
from certify.kit.correctness import MATCH_TOL
from harness.contracts.margins import DEFAULT_MARGINS
from harness.errors import HitchError


def _interval(low: float, high: float, *, reliable: bool = True) -> dict[str, Any]:
    return {"estimate": (low + high) / 2, "low": low, "high": high, "n": 200, "reliable": reliable}


def _row(api: str, i: int, tokens: list[str] | None, logprobs: list[float] | None = None, text: str = "abc") -> dict[str, Any]:
    return {"api": api, "prompt": i, "prompt_text": f"prompt {i}", "text": text, "finish": "length",
            "output_tokens": len(tokens) if tokens else 3, "tokens": tokens, "logprobs": logprobs}  # fmt: skip


def _entry() -> dict[str, Any]:
    rows = [_row("chat", 0, ["b:61", "b:62", "b:63"], [-0.1, -0.2, -0.3]), _row("responses", 0, None, text="hello world")]
    return {
        "level": "provisional",
        "checks": [
            {"id": "correctness.continuations", "status": "passed", "details": {"continuations": rows}},
            {"id": "correctness.parity.chat", "status": "passed",
             "details": {"prompts": [{"diverged_at": None, "max_match_gap": 0.05}, {"diverged_at": 9, "max_match_gap": 0.1}]}},
            {"id": "perf.overhead.e2e_bound", "status": "passed",
             "details": {"unary.added_ci_ms": {"p50": _interval(0.5, 1.5), "p99": _interval(1.0, 9.0, reliable=False)}}},
            {"id": "protocol.chat.stream", "status": "passed", "details": {}},
            {"id": "faults.engine.oom", "status": "not_run", "details": {}},
        ],
        "metrics": {"gateway_residence_ms": {"p95": _interval(0.2, 0.4)}, "throughput_ratio_c32": 0.98},
    }  # fmt: skip


def _check(entry: dict[str, Any], cid: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in entry["checks"] if c["id"] == cid)
    return found


def _again(entry: dict[str, Any]) -> dict[str, Any]:
    """A second certification with the same outcomes (another finishing time)."""
    return {**copy.deepcopy(entry), "finished_at": "later"}


def test_the_same_entry_is_reproduced_and_every_kind_was_compared() -> None:
    result = compare_entries(_entry(), _again(_entry()))
    assert result.reproduced and result.to_json()["verdict"] == "reproduced"
    assert result.compared == {"checks": 5, "continuations": 2, "figures": 3}
    p99 = next(d for d in result.figures if d.name.endswith("p99"))
    assert p99.verdict == "inconclusive" and not p99.material  # unreliable in the entries: decided, not material
    assert any("p99" in n and "too few samples" in n for n in result.notes)
    assert any("before schema 4" in n for n in result.notes)  # no margins in this entry: today's defaults


def test_an_entry_compared_with_itself_is_refused() -> None:
    with pytest.raises(HitchError) as info:
        compare_entries(_entry(), copy.deepcopy(_entry()))
    assert info.value.code == "comparison_with_itself"


def test_tens_of_microseconds_of_gateway_time_are_the_same_gateway() -> None:
    """The issue's case: two intervals that do not overlap, microseconds apart, are not a difference."""
    a, b = _entry(), _again(_entry())
    a["metrics"]["itl_added_ci_ms"] = {"p95": {"estimate": 0.02, "low": 0.005, "high": 0.030, "n": 300, "reliable": True}}
    b["metrics"]["itl_added_ci_ms"] = {"p95": {"estimate": 0.04, "low": 0.036, "high": 0.049, "n": 300, "reliable": True}}
    result = compare_entries(a, b)
    itl = next(d for d in result.figures if d.name == "metrics.itl_added_ci_ms.p95")
    assert itl.kind == "gateway_time" and itl.verdict == "same" and result.verdict == "reproduced"


def test_the_original_entry_s_margins_decide_and_a_wide_material_figure_is_inconclusive() -> None:
    a, b = _entry(), _again(_entry())
    b["metrics"]["gateway_residence_ms"]["p95"] = _interval(0.6, 0.8)
    assert compare_entries(a, b).verdict == "reproduced"  # 0.4 ms apart: within today's 2 ms
    tight = {k: v.to_json_dict() for k, v in DEFAULT_MARGINS.items()} | {"gateway_time": {"relative": 0.0, "absolute": 0.1}}
    differs = compare_entries({**a, "margins": tight}, b)
    assert differs.verdict == "differs" and [d.item for d in differs.differences] == ["metrics.gateway_residence_ms.p95"]
    b["metrics"]["gateway_residence_ms"]["p95"] = _interval(-3.0, 4.0)  # material, and wider than the margin
    undecided = compare_entries(a, b)
    assert undecided.verdict == "inconclusive" and undecided.to_json()["inconclusive"] == ["metrics.gateway_residence_ms.p95"]
    [how] = undecided.to_decide()
    assert how.startswith("metrics.gateway_residence_ms.p95: about ") and "samples in each entry" in how


def test_each_kind_of_difference_is_named() -> None:
    new = _again(_entry())
    new["level"] = "failed"
    _check(new, "protocol.chat.stream")["status"] = "failed"
    rows = _check(new, "correctness.continuations")["details"]["continuations"]
    rows[0]["tokens"][1] = "b:7a"
    rows[1]["text"] = "hello World"
    _check(new, "correctness.parity.chat")["details"]["prompts"][1]["diverged_at"] = 4
    new["metrics"]["gateway_residence_ms"]["p95"] = _interval(5.0, 5.4)  # 4.9 ms more: beyond the 2 ms margin
    _check(new, "perf.overhead.e2e_bound")["details"]["unary.added_ci_ms"]["p50"] = _interval(1.2, 2.0)  # within it
    result = compare_entries(_entry(), new)
    got = {(d.kind, d.item) for d in result.differences}
    assert got == {
        ("level", "level"),
        ("check", "protocol.chat.stream"),
        ("continuation", "correctness.continuations/chat/0"),
        ("continuation", "correctness.continuations/responses/0"),
        ("parity", "correctness.parity.chat/1"),
        ("figure", "metrics.gateway_residence_ms.p95"),
    }
    token = next(d for d in result.differences if d.item.endswith("chat/0"))
    assert "token 1 differs" in token.detail and (token.before, token.now) == ("b:62", "b:7a")
    text = next(d for d in result.differences if d.item.endswith("responses/0"))
    assert "character 6" in text.detail


def test_a_logprob_beyond_the_suites_tolerance_differs_and_one_within_does_not() -> None:
    within, beyond = _again(_entry()), _again(_entry())
    _check(within, "correctness.continuations")["details"]["continuations"][0]["logprobs"][2] = -0.3 + MATCH_TOL / 2
    _check(beyond, "correctness.continuations")["details"]["continuations"][0]["logprobs"][2] = -0.3 - 2 * MATCH_TOL
    assert compare_entries(_entry(), within).reproduced
    [diff] = compare_entries(_entry(), beyond).differences
    assert diff.kind == "logprob" and "token 2" in diff.detail


def test_a_selection_compares_only_the_checks_that_ran_and_not_the_level() -> None:
    new = _again(_entry())
    new["level"] = "failed"
    for check in new["checks"]:
        if check["id"] != "correctness.continuations":
            check["status"] = "not_run"
    result = compare_entries(_entry(), new, selection=True)
    assert result.reproduced and result.compared["checks"] == 1 and result.compared["figures"] == 1  # metrics only
    assert any("level is not compared" in n for n in result.notes)


def test_check_changes_lists_absent_checks_both_ways() -> None:
    new = _again(_entry())
    new["checks"] = [c for c in new["checks"] if c["id"] != "protocol.chat.stream"]
    new["checks"].append({"id": "hardware.lock.served", "status": "passed", "details": {}})
    assert check_changes(_entry(), new) == [
        ("hardware.lock.served", "absent", "passed"),
        ("protocol.chat.stream", "passed", "absent"),
    ]
    result = compare_entries(_entry(), new)
    assert [(d.kind, d.item) for d in result.differences] == [("check", "protocol.chat.stream")]
    assert any(n.startswith("hardware.lock.served: not in the original entry") for n in result.notes)


def test_a_schema_3_unshown_pass_and_a_schema_4_not_applicable_are_the_same_status() -> None:
    from certify.entry_compare import check_changes

    row = {"id": "agents.codex.real_tool_loop", "required": False, "duration_s": 1.0}
    before = {"checks": [{**row, "status": "passed", "details": {"not_applicable": "no tool use"}}]}
    now = {"checks": [{**row, "status": "not_applicable", "details": {"not_applicable": "0 tool round trips"}}]}
    assert check_changes(before, now) == []
    assert check_changes({"checks": [{**row, "status": "passed"}]}, now) == [
        ("agents.codex.real_tool_loop", "passed", "not_applicable")
    ]


def test_figure_kinds_follow_the_figure_not_its_check() -> None:
    from certify.entry_compare import figure_kind

    assert figure_kind("perf.overhead.e2e_bound.unary.direct_e2e_ci_ms.p50") == "latency"
    assert figure_kind("perf.overhead.e2e_bound.unary.added_ci_ms.p95") == "gateway_time"
    assert figure_kind("perf.overhead.ttft_bound.itl_added_ci_ms.p95") == "gateway_time"
    assert figure_kind("metrics.gateway_added_latency_ms.unary.residence_ms.p50") == "gateway_time"
    assert figure_kind("metrics.gateway_latency_difference_ms.stream.p99") == "gateway_time"


def _with_engine_figures(entry: dict[str, Any], scale: float, jitter: float = 0.0) -> dict[str, Any]:
    """The entry with the engine's own E2E percentiles (as the perf suite records them), times ``scale``."""
    out = copy.deepcopy(entry)
    details = _check(out, "perf.overhead.e2e_bound")["details"]
    for i, (p, ms) in enumerate((("p50", 250.0), ("p95", 262.0))):
        centre = ms * scale * (1 + (jitter if i % 2 else -jitter))
        details.setdefault("unary.direct_e2e_ci_ms", {})[p] = {
            "estimate": centre, "low": centre - 1.5, "high": centre + 1.5, "n": 300, "reliable": True
        }  # fmt: skip
    return out


def test_an_entry_against_a_ten_percent_slower_copy_differs_and_against_noise_is_reproduced() -> None:
    original = _with_engine_figures(_entry(), 1.0)
    slower = compare_entries(original, _with_engine_figures(_again(_entry()), 1.10))
    assert slower.verdict == "differs"
    assert sorted(d.item for d in slower.differences) == [
        "perf.overhead.e2e_bound.unary.direct_e2e_ci_ms.p50", "perf.overhead.e2e_bound.unary.direct_e2e_ci_ms.p95"
    ]  # fmt: skip
    noise = compare_entries(original, _with_engine_figures(_again(_entry()), 1.0, jitter=0.004))
    assert noise.verdict == "reproduced" and not noise.differences


def _machine(entry: dict[str, Any], model: str, cores: int) -> dict[str, Any]:
    cpu = {"vendor": "GenuineIntel", "model_name": model, "isa_flags": ["avx2"], "logical_cores": cores,
           "physical_cores": cores, "numa_nodes": 1, "memory_total_bytes": 1 << 34}  # fmt: skip
    return {**entry, "hardware": {"device": "cpu", "cpu": cpu, "host": {"hostname": "h", "os": "linux", "arch": "x86_64"}}}


def test_on_another_machine_timing_differences_are_the_machine_s_and_a_token_is_the_engine_s() -> None:
    original = _machine(_with_engine_figures(_entry(), 1.0), "Xeon 8480", 2)
    elsewhere = _machine(_with_engine_figures(_again(_entry()), 1.10), "EPYC 9654", 8)
    result = compare_entries(original, elsewhere)
    assert result.verdict == "differs" and result.machine == [
        "cpu.logical_cores: 2 then 8", "cpu.model_name: Xeon 8480 then EPYC 9654", "cpu.physical_cores: 2 then 8"
    ]  # fmt: skip
    assert result.causes() == {"machine": [d.item for d in result.differences], "engine": []}
    _check(elsewhere, "correctness.continuations")["details"]["continuations"][0]["tokens"][0] = "b:7a"
    causes = compare_entries(original, elsewhere).causes()
    assert causes["engine"] == ["correctness.continuations/chat/0"] and len(causes["machine"]) == 2
    same_machine = compare_entries(original, _machine(_with_engine_figures(_again(_entry()), 1.10), "Xeon 8480", 2))
    assert same_machine.machine == [] and same_machine.causes()["machine"] == []  # the engine's, here
    assert same_machine.to_json()["machine"] == {"same": True, "differs": []}
