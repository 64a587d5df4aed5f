"""The per-run page: escaped details, checks with badges, evidence, hardware, overhead plots, lifecycle."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.errors import HitchError
from reports.builder import build_run_page
from tests.reports import sample_data as sd


def test_script_in_a_check_detail_is_escaped(tmp_path: Path) -> None:
    html = build_run_page(sd.results(), tmp_path).read_text()
    assert "<script" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html


def test_checks_evidence_hardware_and_lifecycle_are_shown(tmp_path: Path) -> None:
    page = build_run_page(sd.results(), tmp_path)
    html = page.read_text()
    assert page == tmp_path / "run.html"
    plain = html.replace("<wbr>", "")  # ids wrap at their dots
    rows = re.findall(r'<tr class="check-row" data-status="(\w+)" data-required="(\w+)">\s*<td class="mono">([\w.]+)</td>', plain)
    # suites in DESIGN order: hardware, protocol, faults, ..., perf
    assert rows == [
        ("passed", "yes", "hardware.cpu.no_gpu"),
        ("passed", "yes", "protocol.chat.stream"),
        ("failed", "yes", "faults.engine.oom"),
        ("skipped", "no", "perf.overhead"),
    ]
    assert '<span class="badge bad">failed</span>' in html
    assert re.search(r'id="blocking"[^>]*>.*<code>faults\.engine\.oom</code>', html, re.S)
    assert sd.digest("engine.log") in html and sd.digest("requests") in html
    assert "cpu.model" in html and "Test CPU" in html
    assert "lifecycle-timings" in html and "stop.drain_s" in html
    # cancel 120 ms <= 5000 ms and idle stop 3.5 s <= 10 s
    bounds = html[html.index('id="lifecycle-bounds"') :]
    bounds = bounds[: bounds.index("</table>")]
    assert bounds.count('<span class="badge ok">within</span>') == 2


def _charts(html: str) -> list[str]:
    return re.findall(r'<svg class="chart" data-chart="([\w-]+)"', html)


def test_overhead_charts_are_the_signed_decided_figures_and_the_bench_json_s_throughput(tmp_path: Path) -> None:
    html = build_run_page(sd.results(), tmp_path).read_text()
    assert _charts(html)[:4] == ["overhead-residence", "overhead-paired", "overhead-difference", "overhead-throughput-c32"]
    # bound = max(20 ms, 5 % of direct p50): in the decided table, per kind
    decided = html[html.index('id="decided"') : html.index("</table>", html.index('id="decided"'))]
    assert decided.count("bound p50 20.00 ms, p95 20.00 ms") == 2
    for arm in ("direct", "gateway", "reference"):
        assert html.count(f'data-series="{arm}" data-group="stream"') == 1  # the throughput chart
    assert "gateway KiB per open stream" in html


def _chart(html: str, name: str) -> str:
    start = html.index(f'<svg class="chart" data-chart="{name}"')
    return html[start : html.index("</svg>", start)]


def test_charts_draw_intervals_and_never_a_bare_point_whose_interval_holds_zero(tmp_path: Path) -> None:
    html = build_run_page(sd.predicate(), tmp_path, name="signed-only.html").read_text()
    residence = _chart(html, "overhead-residence")
    assert residence.count('class="bar"') == 6 and residence.count('class="err"') == 6  # unary/stream x p50/p95/p99
    # the black-box difference's intervals span the engine's variance (± 190 ms): interval and hollow marker only
    difference = _chart(html, "overhead-difference")
    assert difference.count('class="bar"') == 0
    assert difference.count('class="noise"') == 6 and difference.count('class="err"') == 6
    assert "holds 0: noise" in difference  # said in the chart's text alternative
    table = html[html.index('id="difference"') : html.index("</table>", html.index('id="difference"'))]
    assert "p50, p95, p99: the interval holds 0 — noise, not a figure" in table
    assert "lifecycle-timings" not in html


def test_a_schema_2_entry_s_difference_is_labelled_as_such_and_not_charted(tmp_path: Path) -> None:
    old = {
        **sd.predicate(),
        "schema_version": "2",
        "metrics": {"gateway_added_latency_ms": {"p50": 33.9, "p95": -18.1, "p99": -63.6}},
    }
    html = build_run_page(old, tmp_path).read_text()
    assert [c for c in _charts(html) if c.startswith("overhead")] == []
    legacy = html[html.index('id="legacy-difference"') : html.index("</p>", html.index('id="legacy-difference"'))]
    assert "black-box difference of percentiles (gateway \u2212 direct), without an interval" in legacy
    assert "p50 33.90 ms" in legacy
    summary = html[html.index('id="summary"') : html.index("</section>")]
    assert "This entry predates schema 3" in summary and 'id="way-unknown"' not in summary  # contract: the way is known


def test_every_chart_has_one_unit_and_lifecycle_timings_are_charted_per_unit(tmp_path: Path) -> None:
    lifecycle = {"warm_acquire_ms": 312.0, "idle_stop_s": 3.11, "idle_stop_after_ttl_s": 6.11, "recovery_restart_s": 8.74,
                 "cancel_slot_free_ms": 135.0, "note": "text"}  # fmt: skip
    html = build_run_page({**sd.results(), "lifecycle": lifecycle}, tmp_path).read_text()
    for chart in re.findall(r'<svg class="chart".*?</svg>', html, re.S):
        unit = re.search(r'data-unit="([^"]+)"', chart)
        assert unit, chart[:120]
        plotted = re.findall(r'class="(?:bar|noise|err)" [^>]*data-unit="([^"]+)"', chart)
        assert plotted and set(plotted) == {unit.group(1)}, chart[:120]
        assert re.search(r'aria-label="[^"]+"', chart) and re.search(r"<desc>[^<]+</desc>", chart)
    ms_chart, s_chart = _chart(html, "lifecycle-timings-ms"), _chart(html, "lifecycle-timings-s")
    assert re.findall(r'class="bar" [^>]*data-group="([\w.]+)"', ms_chart) == ["cancel_slot_free_ms", "warm_acquire_ms"]
    assert re.findall(r'class="bar" [^>]*data-group="([\w.]+)"', s_chart) == [
        "idle_stop_after_ttl_s", "idle_stop_s", "recovery_restart_s"
    ]  # fmt: skip
    timings = html[html.index('id="lifecycle"') : html.index("</table>", html.index('id="lifecycle"'))]
    assert "312 ms" in timings and "8.7 s" in timings


def test_the_summary_comes_first_and_says_the_level_the_way_what_was_and_was_not_shown(tmp_path: Path) -> None:
    checks = [
        {"id": "protocol.chat.stream", "status": "passed", "required": True, "duration_s": 0.5, "summary": "4 chunks"},
        {"id": "correctness.natural_stop", "status": "passed", "required": True, "duration_s": 1.0,
         "summary": "not shown for this model: random weights", "details": {"not_applicable": "random weights"}},
        {"id": "agents.harbor.real_model", "status": "skipped", "required": False, "duration_s": 0.0,
         "details": {"reason": "agents.harbor.real_model does not apply to engine=fake device=cpu: scripted answers"}},
        {"id": "agents.harbor.terminus_solves", "status": "skipped", "required": False, "duration_s": 0.0,
         "details": {"reason": "agents.harbor.terminus_solves does not apply to engine=fake device=cpu: scripted"}},
    ]  # fmt: skip
    pred = sd.predicate(
        level="provisional", engine="sglang", checks=checks,
        reasons=["agents.harbor.real_model: optional check skipped", "CPU lacks AMX (amx_tile): the CPU engine needs Intel AMX"],
        to_certify=["run on an x86_64 CPU with Intel AMX (4th-generation Xeon or later): the SGLang CPU engine needs it"],
    )  # fmt: skip
    html = build_run_page(pred, tmp_path).read_text()
    summary = html[html.index('<section id="summary"') : html.index("</section>")]
    assert html.index('<section id="summary"') < html.index("<h2>Checks</h2>")
    assert "Provisional: a real engine passed every required check" in summary
    reasons = summary[summary.index('id="reasons"') : summary.index("</ul>", summary.index('id="reasons"'))]
    assert "CPU lacks AMX" in reasons and "optional check skipped" not in reasons  # a check's reason is under "not shown"
    assert "<li>run on an x86_64 CPU with Intel AMX" in summary[summary.index('id="way"') :]
    shown = re.findall(r'<tr data-suite="(\w+)"><th>\w+</th><td class="num"><span class="badge \w+">(\d+/\d+)</span>', summary)
    assert shown == [("protocol", "1/1"), ("correctness", "0/1"), ("agents", "0/2")]  # not applicable: not a pass
    row = re.search(r'<tr class="check-row" data-status="not_applicable".*?</tr>', html, re.S)
    assert row and '<span class="badge warn">not shown</span>' in row.group(0)  # a schema-3 row reads as not shown
    groups = re.findall(r'data-head="([^"]+)"><details><summary>[^<]* — (\d+) checks?</summary>', summary)
    assert groups == [("not applicable to this model", "1"), ("does not apply to engine=fake device=cpu", "2")]
    assert "Gateway overhead" in summary and "§15.4 within" in summary


def test_no_raw_json_is_visible_until_expanded(tmp_path: Path) -> None:
    html = build_run_page(sd.results(), tmp_path).read_text()
    visible = re.sub(r"<details.*?</details>", "", html, flags=re.S)
    visible = re.sub(r"<(style|svg)\b.*?</\1>", "", visible, flags=re.S)
    assert "{&#34;" not in visible and "&#34;:" not in visible
    assert "chunks" in html  # the details are still on the page, inside <details>
    rows = re.findall(r'<tr class="check-row".*?</tr>', html, re.S)
    assert rows and all('<details class="raw"><summary>details</summary><pre class="details">' in r for r in rows)


def test_intervals_decide_the_bound_and_a_negative_difference_is_called_noise(tmp_path: Path) -> None:
    results = sd.results()
    unary = results["overhead"]["results"]["unary"]["gateway"]
    unary["added_latency_ms"] = {"p50": -0.25, "p95": 0.4, "p99": 1.2}
    unary["added_latency_ci_ms"] = {
        "p50": {"estimate": -0.25, "low": -0.6, "high": 0.1, "n": 60, "reliable": True, "noise": True},
        "p95": {"estimate": 0.4, "low": 0.1, "high": 0.9, "n": 60, "reliable": True, "noise": False},
        "p99": {"estimate": 1.2, "low": -0.3, "high": 4.0, "n": 60, "reliable": False, "noise": True},
    }
    stream = results["overhead"]["results"]["stream"]["gateway"]
    # the point figures are within 20 ms, the upper end of p95's interval is not: the interval decides
    stream["added_latency_ci_ms"] = {
        p: {"estimate": 1.0, "low": 0.5, "high": 25.0, "n": 300, "reliable": True, "noise": False} for p in ("p50", "p95", "p99")
    }
    html = build_run_page(results, tmp_path).read_text()
    table = html[html.index('id="overhead"') :]
    table = table[: table.index("</table>")]
    assert "95 % [-0.60, 0.10] n=60" in table
    assert "negative: noise, not a speed-up" in table
    assert "unreliable: n=60 per arm" in table
    gateway_rows = [r for r in table.split("<tr>") if "<td>gateway</td>" in r]
    assert ["within" in r.split("badge")[-1] for r in gateway_rows] == [True, False]  # unary, stream


def test_the_badge_is_the_measurement_s_decision_and_the_time_in_the_gateway_is_shown(tmp_path: Path) -> None:
    results = sd.results()
    wide = {"estimate": 1.0, "low": -140.0, "high": 140.0, "n": 30, "reliable": True, "noise": True}
    for kind, decided in (("unary", []), ("stream", ["TTFT p95: time in the gateway 30 ms ..."])):
        gw = results["overhead"]["results"][kind]["gateway"]
        gw["added_latency_ci_ms"] = {p: dict(wide) for p in ("p50", "p95", "p99")}  # an engine's variance: undecided
        gw["residence_ci_ms"] = {p: {**wide, "estimate": 1.5, "low": 1.2, "high": 2.0} for p in ("p50", "p95", "p99")}
        gw["over_bound"] = decided
    html = build_run_page(results, tmp_path).read_text()
    table = html[html.index('id="overhead"') :]
    table = table[: table.index("</table>")]
    gateway_rows = [r for r in table.split("<tr>") if "<td>gateway</td>" in r]
    assert ["within" in r.split("badge")[-1] for r in gateway_rows] == [True, False]  # unary, stream
    assert all("1.50 / 1.50 / 1.50" in r for r in gateway_rows)


def test_the_paired_shift_is_shown_with_its_interval_and_verdict(tmp_path: Path) -> None:
    results = sd.results()
    gw = results["overhead"]["results"]["stream"]["gateway"]
    gw["added_paired_ms"] = {"estimate": 4.85, "low": 2.84, "high": 7.56, "n": 90, "reliable": True, "noise": False}
    gw["paired_target"] = {"bound_ms": 6.81, "verdict": "undecided"}
    html = build_run_page(results, tmp_path).read_text()
    table = html[html.index('id="overhead"') :]
    table = table[: table.index("</table>")]
    stream_row, unary_row = (
        next(r for r in table.split("<tr>") if "<td>gateway</td>" in r and f"<td>{kind}</td>" in r)
        for kind in ("stream", "unary")
    )
    assert '4.85<br><small class="ci">95 % [2.84, 7.56] n=90 pairs' in stream_row
    assert "1 % target: undecided" in stream_row
    assert "pairs" not in unary_row  # a JSON without the paired figure shows none, never an invented one


@pytest.mark.parametrize(
    ("field", "value"),
    [("checks", "not a list"), ("checks", [{"status": "passed"}]), ("evidence", ["x"]), ("overhead", {"x": 1}), ("lifecycle", 3)],
)
def test_malformed_results_are_an_input_error_and_write_nothing(tmp_path: Path, field: str, value: object) -> None:
    results = {**sd.results(), field: value}
    with pytest.raises(HitchError) as err:
        build_run_page(results, tmp_path)
    assert err.value.code == "report_input_invalid"
    assert not (tmp_path / "run.html").exists()


def test_evidence_is_linked_and_text_shown_inline(tmp_path: Path) -> None:
    from catalog.evidence import store_blob

    log = ("engine started <ok> & ready\n" * 200).encode()
    results = sd.results()
    digest = store_blob(tmp_path / "evidence", log)
    missing = sd.digest("x")
    results["evidence"] = {"hardware.server_info.device/engine.log": digest, "protocol.chat.stream/requests.jsonl": missing}
    html = build_run_page(results, tmp_path).read_text()
    href = f"evidence/sha256-{digest.removeprefix('sha256:')}"
    assert f'<a href="{href}">hardware.server_info.device/engine.log</a>' in html
    assert (tmp_path / href).read_bytes() == log
    assert "engine started &lt;ok&gt; &amp; ready" in html and "(truncated; the link has the whole file)" in html
    assert 'protocol.chat.stream/requests.jsonl <span class="muted">(not kept here)</span>' in html


def test_the_model_is_named_beside_its_digest(tmp_path: Path) -> None:
    model = {"name": "SmolLM2-135M-Instruct", "architecture": "LlamaForCausalLM", "parameters": 134515008,
             "license": "Apache-2.0", "source": "HuggingFaceTB/SmolLM2-135M-Instruct"}  # fmt: skip
    html = build_run_page({**sd.results(), **sd.predicate(model=model)}, tmp_path).read_text()
    facts = html[html.index('id="facts"') : html.index("</table>", html.index('id="facts"'))]
    for key, value in model.items():
        assert re.search(rf"<th>model_{key}</th><td class=\"mono\">[^<]*{re.escape(str(value)[:8])}", facts), key
    assert facts.index("model_id") < facts.index("model_name")
    bare = build_run_page(sd.results(), tmp_path / "bare").read_text()
    assert "model_name" not in bare  # an entry without the facts shows its digest only


def test_fault_checks_are_grouped_by_kind_with_what_the_client_saw_and_the_recovery(tmp_path: Path) -> None:
    net = {"fault_kind": "network", "fault": {"via": "proxy", "spec": ["reset"]}, "client": {"status": 200, "broken": True}}
    checks = [
        {"id": "faults.connection_reset.broken_stream", "status": "passed", "required": True, "duration_s": 1.0,
         "details": {**net, "evidence": {"status": "failed"}, "recovery_ms": 412.5}},
        {"id": "faults.engine_killed.in_flight", "status": "passed", "required": True, "duration_s": 0.1,
         "details": {"fault_kind": "process", "client": {"status": 200, "broken": True}, "recovery_ms": 9100.0}},
        {"id": "faults.ignore_aborts.permit_released", "status": "skipped", "required": True, "duration_s": 0.0,
         "details": {"reason": "SGLang honours an abort"}},
        {"id": "protocol.chat.stream", "status": "passed", "required": True, "duration_s": 0.5, "details": {}},
    ]  # fmt: skip
    checks[0]["details"]["fault"]["spec"] = ['{"mode":"reset","after_events":2}']  # as the proxy records it
    checks[1]["details"]["evidence"] = {"status": "failed", "error_code": "inference_upstream_failed", "http_status": 502}
    html = build_run_page({**sd.results(), "checks": checks}, tmp_path).read_text()
    kinds = re.findall(r'<table class="faults full" data-kind="([\w-]+)">', html)
    assert kinds == ["network", "not-run-here", "process"]
    network = html[html.index('data-kind="network"') : html.index('data-kind="not-run-here"')]
    row = re.findall(r"<td>(.*?)</td>", network[network.index("broken_stream") :], re.S)
    assert row[:2] == [
        "via proxy, spec reset, after events 2",
        '<span class="badge ok">HTTP 200</span> <span class="badge info">broken</span> ',
    ]
    assert '<span class="badge bad">failed</span>' in row[2] and "412 ms" in network
    assert "&#34;" not in network and "protocol.chat.stream" not in network  # words and badges, no JSON
    process = html[html.index('data-kind="process"') :]
    process = process[: process.index("</table>")]
    for chip in ('<span class="badge bad">HTTP 502</span>', '<span class="badge warn">inference_upstream_failed</span>'):
        assert chip in process
    assert "9.1 s" in process  # 9100 ms, in a unit a person reads
    assert "SGLang honours an abort" in html[html.index('data-kind="not-run-here"') : html.index('data-kind="process"')]


def test_a_failed_run_says_why_in_counts_and_actions(tmp_path: Path) -> None:
    checks = [
        {"id": "faults.engine.oom", "status": "failed", "required": True, "duration_s": 1.0, "details": {"reason": "E  boom"}},
        *({"id": f"protocol.p{i}", "status": "not_run", "required": True, "duration_s": 0.0} for i in range(6)),
    ]
    html = build_run_page(sd.predicate(level="failed", checks=checks, reasons=[]), tmp_path).read_text()
    summary = html[html.index('<section id="summary"') : html.index("</section>")]
    assert "<li>1 required check(s) failed: faults.engine.oom</li>" in summary
    assert "<li>6 required check(s) did not run: protocol.p0, protocol.p1, protocol.p2, protocol.p3 and 2 more</li>" in summary
    way = re.findall(r"<li>(.*?)</li>", summary[summary.index('id="way"') :].split("</ol>", 1)[0])
    assert way == [
        "make the failed required checks pass (faults.engine.oom)",
        "run every suite (pytest certify without -k); 6 required check(s) did not run",
    ]
