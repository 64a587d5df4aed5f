"""``hitch bench load``: the stream probe, the schedule's checks, the summary, and whole runs against the fake
engine (locust runs in its own process; nothing here imports locust)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from certify.load.schedule import schedule_facts
from certify.load.sse import StreamProbe, check_unary
from certify.load.summary import build_summary, render_table, target_figures
from harness.app.load_schedule import LoadSchedule, parse_run_time, targets_for
from harness.errors import HitchError

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]
REPO = Path(__file__).resolve().parents[2]


def _hitch(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HITCH, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env={**os.environ})


def _chat_event(content: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}).encode() + b"\n\n"


def test_probe_chat_stream_split_anywhere_gives_ttft_and_itl() -> None:
    stream = _chat_event("") + _chat_event("Hel") + _chat_event("lo") + _chat_event("!") + b"data: [DONE]\n\n"
    probe = StreamProbe("chat", t0=10.0)
    # One byte at a time: a line is only read once it is complete.
    for i, byte in enumerate(stream):
        probe.feed(bytes([byte]), 10.0 + i / 1000)
    assert probe.verdict() is None
    assert len(probe.text_times) == 3  # the empty role delta carries no text
    assert probe.ttft_ms == pytest.approx((probe.text_times[0] - 10.0) * 1000)
    assert probe.itl_ms == pytest.approx((probe.text_times[2] - probe.text_times[0]) * 1000 / 2)


def test_probe_responses_stream_ends_with_completed() -> None:
    delta = {"type": "response.output_text.delta", "delta": "hi"}
    probe = StreamProbe("responses", t0=0.0)
    probe.feed(b"event: response.output_text.delta\r\ndata: " + json.dumps(delta).encode() + b"\r\n\r\n", 0.5)
    assert probe.verdict() == "stream ended without its final event"
    probe.feed(b'event: response.completed\ndata: {"type": "response.completed"}\n\n', 0.6)
    assert probe.verdict() is None
    assert probe.ttft_ms == 500.0
    assert probe.itl_ms is None  # one text event: no gap


@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (_chat_event("x"), "stream ended without its final event"),
        (b"data: [DONE]\n\n", "stream carried no output text"),
        (b'data: {"error": {"message": "boom"}}\n\n' + _chat_event("x") + b"data: [DONE]\n\n", "error event"),
        (b"data: {not json\n\n", "undecodable SSE data"),
    ],
)
def test_probe_failures(stream: bytes, why: str) -> None:
    probe = StreamProbe("chat", t0=0.0)
    probe.feed(stream, 1.0)
    verdict = probe.verdict()
    assert verdict is not None and verdict.startswith(why)


def test_unary_check() -> None:
    assert check_unary("chat", b'{"choices": [{"message": {"content": "x"}}]}') is None
    assert check_unary("chat", b'{"choices": []}') == "no choices in the response"
    assert check_unary("responses", b'{"status": "completed"}') is None
    assert check_unary("responses", b'{"status": "failed"}') == "response status 'failed'"
    assert check_unary("chat", b"<html>") == "response body is not JSON"


@pytest.mark.parametrize(("text", "seconds"), [("30", 30.0), ("30s", 30.0), ("2m", 120.0), ("1m30s", 90.0), ("1h", 3600.0)])
def test_run_time(text: str, seconds: float) -> None:
    assert parse_run_time(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "1x", "25h", "m"])
def test_bad_run_time_is_a_usage_error(text: str) -> None:
    with pytest.raises(HitchError) as info:
        parse_run_time(text)
    assert info.value.code == "usage_error" and info.value.exit_code == 2


@pytest.mark.parametrize(
    "kwargs",
    [{"users": 0}, {"spawn_rate": 0.0}, {"run_time_s": 0.5}, {"max_tokens": 0}, {"api": "completions"}],
)
def test_bad_schedule_is_a_usage_error(kwargs: dict[str, Any]) -> None:
    base: dict[str, Any] = {"users": 2, "spawn_rate": 1.0, "run_time_s": 3.0}
    with pytest.raises(HitchError) as info:
        LoadSchedule(**{**base, **kwargs})
    assert info.value.code == "usage_error"


def test_targets_order() -> None:
    assert targets_for("both") == ["direct", "gateway"]
    assert targets_for("gateway") == ["gateway"]
    with pytest.raises(HitchError):
        targets_for("reference")


def test_summary_ratios_and_table() -> None:
    def fig(rps_requests: int, lat: float) -> dict[str, Any]:
        return target_figures(
            requests=rps_requests, failures=0, exceptions=0, duration_s=10.0, latency_ms=[lat, lat], ttft_ms=[lat / 2], itl_ms=[]
        )

    schedule = schedule_facts(LoadSchedule(users=2, spawn_rate=1.0, run_time_s=10.0))
    summary = build_summary(
        engine="fake",
        schedule=schedule,
        order=["direct", "gateway"],
        targets={"direct": fig(100, 10.0), "gateway": fig(90, 12.0)},
        machine={},
    )
    ratios = summary["ratios"]["gateway_vs_direct"]
    assert ratios["rps"] == 0.9 and ratios["p50"] == 1.2 and ratios["ttft_p50"] == 1.2
    assert ratios["itl_p50"] is None  # no ITL values: no ratio
    assert summary["targets"]["gateway"]["stats_csv"] == "gateway_stats.csv"
    table = render_table(summary)
    assert "gw/direct" in table and "1.200" in table


def test_no_locust_in_the_hitch_process() -> None:
    code = (
        "import sys, harness.cli.app, harness.cli.bench, certify.load.bench, certify.load.summary;"
        "sys.exit(1 if {'locust', 'gevent'} & set(sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=120).returncode == 0


@pytest.mark.parametrize("bad", [["--users", "0"], ["--spawn-rate", "0"], ["--run-time", "soon"], ["--target", "nowhere"]])
def test_bad_option_is_a_usage_error(bad: list[str], tmp_path: Path) -> None:
    proc = _hitch("bench", "load", *bad, "--out", str(tmp_path / "out"), "--json", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert json.loads(proc.stdout)["error"]["code"] == "usage_error"
    assert not (tmp_path / "out").exists()


def _rows(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with path.open() as f:
        return {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}


@pytest.mark.slow
@pytest.mark.integration
def test_both_targets_stream(tmp_path: Path) -> None:
    out = tmp_path / "load"
    args = ["--target", "both", "--users", "3", "--spawn-rate", "3", "--run-time", "3", "--engine", "fake", "--out", str(out),
            "--json"]  # fmt: skip
    proc = _hitch("bench", "load", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout)
    summary = json.loads((out / "summary.json").read_text())
    assert printed["targets"] == summary["targets"]
    assert summary["order"] == ["direct", "gateway"] and summary["stream"] is True
    for name in ("direct", "gateway"):
        t = summary["targets"][name]
        assert t["requests"] > 0 and t["failures"] == 0 and t["exceptions"] == 0
        assert t["ttft_p50_ms"] is not None and t["ttft_p95_ms"] is not None and t["itl_p50_ms"] is not None
        assert (out / f"{name}_stats_history.csv").stat().st_size > 0
        rows = _rows(out / f"{name}_stats.csv")
        assert int(rows[("POST", "/v1/chat/completions")]["Request Count"]) == t["requests"]
        assert int(rows[("POST", "/v1/chat/completions")]["Failure Count"]) == 0
        assert int(rows[("SSE", "ttft")]["Request Count"]) == t["requests"]
    assert set(summary["ratios"]["gateway_vs_direct"]) >= {"rps", "p50", "p95", "p99", "ttft_p50"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".load.")]  # staging folder gone


@pytest.mark.slow
@pytest.mark.integration
def test_gateway_responses_non_stream(tmp_path: Path) -> None:
    out = tmp_path / "load"
    args = ["--target", "gateway", "--api", "responses", "--no-stream", "--users", "2", "--spawn-rate", "2", "--run-time", "2",
            "--engine", "fake"]  # fmt: skip
    proc = _hitch("bench", "load", *args, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["targets"]) == ["gateway"] and "ratios" not in summary
    t = summary["targets"]["gateway"]
    assert t["requests"] > 0 and t["failures"] == 0 and t["ttft_p50_ms"] is None
    assert ("POST", "/v1/responses") in _rows(out / "gateway_stats.csv")
    assert not (out / "direct_stats.csv").exists()
    assert "gateway" in proc.stdout and "wrote" in proc.stdout
