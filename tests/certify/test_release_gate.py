"""The release gate end to end: a real-engine session whose Codex loop did not run is refused ``certified``, and the
run page says why in its summary."""

from __future__ import annotations

import re
from pathlib import Path

from certify.evaluate import CheckResult, Platform, evaluate
from certify.registry import all_checks
from harness.contracts.certification import CertificationResultV1
from reports.builder import build_run_page
from tests.reports import sample_data as sd

LOOP = "agents.codex.real_tool_loop"
NEEDS = "a Codex run on the real engine whose model makes at least 2 tool round trips and changes a file"


def _session(*, loop: CheckResult | None) -> dict[str, CheckResult]:
    """Every check the suites declare for real SGLang on a CPU, passed; the real-engine Codex loop as given."""
    declared = all_checks()
    results = {cid: CheckResult(cid, "passed", 1.0) for cid, spec in declared.items() if spec.applies("sglang", "cpu")}
    results.pop(LOOP)
    if loop is not None:
        results[LOOP] = loop
    return results


def _page(results: dict[str, CheckResult], tmp_path: Path) -> tuple[str, str]:
    """(level, the run page's summary block) of a session on a platform and runtime that are certifiable."""
    platform = Platform("sglang", "cpu", True, (), True, ())
    ev = evaluate(all_checks(), results, platform)
    predicate = CertificationResultV1.model_validate(
        {
            **sd.predicate(),
            "engine": "sglang",
            "level": ev.level,
            "reasons": ev.reasons,
            "to_certify": ev.to_certify,
            "checks": ev.checks,
        }
    ).to_json_dict()
    html = build_run_page(predicate, tmp_path).read_text()
    return ev.level, html[html.index('<section id="summary"') : html.index("</section>")]


def test_a_session_whose_real_engine_codex_loop_did_not_run_is_not_certified_and_the_page_says_why(tmp_path: Path) -> None:
    results = _session(loop=None)
    assert evaluate(all_checks(), {**results, LOOP: CheckResult(LOOP, "passed", details={"tool_round_trips": 2,
                    "file_changed": True})}, Platform("sglang", "cpu", True, (), True, ())).level == "certified"  # fmt: skip
    level, summary = _page(results, tmp_path)
    assert level == "provisional"
    assert "Provisional: a real engine passed every required check" in summary
    reasons = re.findall(r"<li>(.*?)</li>", summary[summary.index('id="reasons"') :].split("</ul>", 1)[0])
    assert reasons == [f"not certified without {NEEDS}: {LOOP} did not run"]
    way = summary[summary.index('id="way"') :].split("</ol>", 1)[0]
    assert "certify a model that drives Codex&#39;s tool loop" in way


def test_a_loop_the_model_could_not_drive_is_named_on_the_page(tmp_path: Path) -> None:
    why = "SmolLM2-135M calls no tool: it answers in prose"
    loop = CheckResult(
        LOOP, "not_applicable", 300.0, {"tool_round_trips": 0, "file_changed": False, "requests": 1, "not_applicable": why}
    )
    level, summary = _page(_session(loop=loop), tmp_path)
    assert level == "provisional"
    assert f"not certified without {NEEDS}: the model cannot: {why}" in summary
    not_shown = summary[summary.index('id="not-shown"') :]
    assert 'data-head="not applicable to this model"' in not_shown and f"<code>{LOOP}</code>: {why}" in not_shown
