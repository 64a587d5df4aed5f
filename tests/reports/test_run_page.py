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
    rows = re.findall(r'<tr class="check-row" data-status="(\w+)" data-required="(\w+)">\s*<td class="mono">([\w.]+)</td>', html)
    # suites in DESIGN order: hardware, protocol, faults, ..., perf
    assert rows == [
        ("passed", "yes", "hardware.cpu.no_gpu"),
        ("passed", "yes", "protocol.chat.stream"),
        ("failed", "yes", "faults.engine.oom"),
        ("skipped", "no", "perf.overhead"),
    ]
    assert '<span class="badge bad">failed</span>' in html
    assert re.search(r'id="blocking">.*<code>faults\.engine\.oom</code>', html, re.S)
    assert sd.digest("engine.log") in html and sd.digest("requests") in html
    assert "cpu.model" in html and "Test CPU" in html
    assert "lifecycle-timings" in html and "stop.drain_s" in html
    # cancel 120 ms <= 5000 ms and idle stop 3.5 s <= 10 s
    bounds = html[html.index('id="lifecycle-bounds"') :]
    bounds = bounds[: bounds.index("</table>")]
    assert bounds.count('<span class="badge ok">within</span>') == 2


def test_overhead_plots_come_from_the_bench_json(tmp_path: Path) -> None:
    html = build_run_page(sd.results(), tmp_path).read_text()
    charts = re.findall(r'<svg class="chart" data-chart="([\w-]+)"', html)
    assert charts[:6] == [
        "overhead-unary-added",
        "overhead-unary-percentiles",
        "overhead-stream-added",
        "overhead-stream-percentiles",
        "overhead-stream-ttft",
        "overhead-throughput-c32",
    ]
    # bound = max(20 ms, 5 % of direct p50 4 ms) = 20 ms; all three arms have throughput bars for both kinds
    assert "§15.4 bound 20.0 ms" in html
    for arm in ("direct", "gateway", "reference"):
        assert html.count(f'data-series="{arm}" data-group="stream"') == 1
    assert "gateway KiB per open stream" in html


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


def test_without_overhead_json_the_signed_metrics_are_plotted(tmp_path: Path) -> None:
    results = sd.predicate()
    html = build_run_page(results, tmp_path, name="other.html").read_text()
    assert 'data-chart="overhead-metrics-added"' in html
    assert html.count('class="bar" data-series="gateway"') == 3
    assert "lifecycle-timings" not in html


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
    html = build_run_page({**sd.results(), "checks": checks}, tmp_path).read_text()
    kinds = re.findall(r'<table class="faults" data-kind="([\w-]+)">', html)
    assert kinds == ["network", "not-run-here", "process"]
    network = html[html.index('data-kind="network"') : html.index('data-kind="process"')]
    assert "faults.connection_reset.broken_stream" in network and "412.5" in network
    assert "&#34;broken&#34;: true" in network and "protocol.chat.stream" not in network
    assert "SGLang honours an abort" in html[html.index('data-kind="not-run-here"') : html.index('data-kind="process"')]
