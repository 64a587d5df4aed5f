"""The one overhead measurement (certify.perf): its TTFT/ITL definition, its summary and a short run.

No timed assertions: the figures are computed from chosen samples, and the short run on the fake engine
asserts shapes, counts and the work done, never how long anything took."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from certify.components import missing
from certify.perf.loops import Plan, Round, Sample
from certify.perf.nginx_relay import nginx_binary
from certify.perf.reading import StreamClock, carries_text
from certify.perf.summary import over_bound, render, summarize


def _chat(delta: dict[str, object]) -> bytes:
    return b"data: " + json.dumps({"id": "x", "choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"


def test_ttft_is_the_first_event_carrying_text_and_itl_the_mean_gap() -> None:
    clock = StreamClock("chat", t0=1.0)
    clock.feed(_chat({"role": "assistant", "content": ""}), 1.1)  # the role chunk is no token
    clock.feed(_chat({"content": ""}), 1.2)
    clock.feed(_chat({"content": "a"})[:10], 1.25)  # an event counts once complete
    clock.feed(_chat({"content": "a"})[10:], 1.3)
    clock.feed(_chat({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}), 1.5)
    clock.feed(_chat({"reasoning_content": "hm"}) + b"data: [DONE]\n\n", 1.7)
    assert clock.ttft == pytest.approx(0.3)
    assert clock.itl == pytest.approx((1.7 - 1.3) / 2)
    assert clock.events[-1] == (None, b"[DONE]")


def test_responses_text_events_need_a_non_empty_delta() -> None:
    assert carries_text("responses", b"response.output_text.delta", b'{"delta": "x"}')
    assert not carries_text("responses", b"response.output_text.delta", b'{"delta": ""}')
    assert not carries_text("responses", b"response.created", b'{"response": {}}')
    assert carries_text("responses", None, b'{"type": "response.function_call_arguments.delta", "delta": "{"}')


def _rounds(n: int, added_s: float, rounds: int = 2) -> list[Round]:
    out = []
    for r in range(rounds):
        rd = Round()
        for kind in ("unary", "stream"):
            base = [0.010 + 0.0001 * ((i * 7 + r) % 13) for i in range(n)]
            stream = kind == "stream"
            rd.c1[kind] = {
                "direct": [Sample(b, b / 2 if stream else None, b / 20 if stream else None, 8) for b in base],
                "gateway": [
                    Sample(b + added_s, (b + added_s) / 2 if stream else None, b / 20 if stream else None, 8) for b in base
                ],
            }
            rd.rps[kind] = {"direct": 100.0, "gateway": 95.0}
            rd.cpu_ms_c1[kind] = {"direct": 0.0, "gateway": 0.5}
            rd.cpu_ms_conc[kind] = {"direct": 0.0, "gateway": 0.4}
        out.append(rd)
    return out


def _drifting(added_s: float, jitter_s: float = 0.0, rounds: int = 4, n: int = 30) -> list[Round]:
    """Rounds whose engine drifts by 20 % from round to round and spreads within one; the gateway sample of
    each pair is its direct sample's machine state plus ``added_s`` and, alternately, +/- ``jitter_s``."""
    out = []
    for r in range(rounds):
        rd = Round()
        for kind in ("unary", "stream"):
            base = [0.800 * (1 + 0.2 * ((r * 3) % 4)) + 0.004 * ((i * 11) % 23) for i in range(n)]
            gw = [b + added_s + (jitter_s if i % 2 else -jitter_s) for i, b in enumerate(base)]
            rd.c1[kind] = {"direct": [Sample(b, b / 8, b / 128, 128) for b in base]}
            rd.c1[kind]["gateway"] = [Sample(g, g / 8, g / 128, 128) for g in gw]
            rd.rps[kind] = {"direct": 1.0, "gateway": 1.0}
            rd.cpu_ms_c1[kind] = rd.cpu_ms_conc[kind] = {"direct": 0.0, "gateway": 1.0}
        out.append(rd)
    return out


def test_the_paired_shift_resolves_what_drift_hides_from_the_pooled_difference() -> None:
    plan = Plan(rounds=4, warmup=0, n_c1=30, concurrency=1, n_conc=1, max_tokens=128)
    met = summarize(_drifting(0.001), plan, {})["results"]["stream"]["gateway"]
    assert met["added_latency_ci_ms"]["p50"]["noise"]  # the rounds' drift swamps 1 ms in the pooled difference
    paired = met["added_paired_ms"]
    assert paired["estimate"] == pytest.approx(1.0) and paired["n"] == 120 and not paired["noise"]
    assert met["paired_target"]["verdict"] == "met" and met["paired_target"]["bound_ms"] > 8.0  # 1 % of ~1 s

    missed = summarize(_drifting(0.030), plan, {})["results"]["unary"]["gateway"]
    assert missed["added_paired_ms"]["low"] > missed["paired_target"]["bound_ms"]
    assert missed["paired_target"]["verdict"] == "missed"

    # pairs that disagree by +/- 20 ms around a 5 ms shift cannot place it against a ~10 ms target
    loose = summarize(_drifting(0.005, jitter_s=0.020), plan, {})["results"]["unary"]["gateway"]
    assert loose["added_paired_ms"]["low"] < loose["paired_target"]["bound_ms"] < loose["added_paired_ms"]["high"]
    assert loose["paired_target"]["verdict"] == "undecided"
    assert "E2E added (paired, n=120 pairs)" in render(summarize(_drifting(0.001), plan, {}))


def test_summary_states_samples_intervals_and_the_bound_on_the_interval() -> None:
    plan = Plan(rounds=2, warmup=0, n_c1=60, concurrency=4, n_conc=8, max_tokens=8)
    report = summarize(_rounds(60, 0.002), plan, {})
    gw = report["results"]["unary"]["gateway"]
    assert report["samples_per_arm"] == 120
    ci = gw["added_latency_ci_ms"]
    assert ci["p50"]["estimate"] == pytest.approx(2.0)
    assert ci["p50"]["low"] > 0 and not ci["p50"]["noise"]  # a constant 2 ms is told apart from noise
    assert ci["p99"]["reliable"] and ci["p50"]["n"] == 120
    assert gw["e2e_ratio"]["p50"] == pytest.approx(
        (report["results"]["unary"]["direct"]["p50_ms"] + 2.0) / report["results"]["unary"]["direct"]["p50_ms"]
    )
    assert not over_bound(gw, "e2e", "")
    stream = report["results"]["stream"]["gateway"]
    assert stream["itl_added_ci_ms"]["p50"]["noise"]  # same ITL in both arms
    assert stream["ttft_added_ci_ms"]["p50"]["estimate"] == pytest.approx(1.0)

    slow = summarize(_rounds(60, 0.050), plan, {})["results"]["unary"]["gateway"]
    assert [line.split(":")[0] for line in over_bound(slow, "e2e", "")] == ["p50", "p95"]


def _engine_bound_rounds(n: int, residence_s: float, jitter_s: float, extra_s: float = 0.0) -> list[Round]:
    """A CPU engine's ~1.6 s answers varying by +-``jitter_s`` per request; the gateway arm's samples carry the
    engine's share (as its evidence gives it) and ``residence_s`` on top; ``extra_s``: time the gateway adds
    that its own clock does not show (the client's E2E holds it, the engine's share does too)."""
    rd = Round()
    for kind in ("unary", "stream"):
        engine = [1.6 + jitter_s * (((i * 37) % 101) / 50 - 1) for i in range(2 * n)]
        direct = [Sample(e, 0.15, 0.1, 16) for e in engine[:n]]
        gateway = []
        for e in engine[n:]:
            share = e + extra_s
            s = Sample(share + residence_s, 0.15 + residence_s, 0.1, 16, "rid", engine=share, engine_ttft=0.15)
            gateway.append(s)
        rd.c1[kind] = {"direct": direct, "gateway": gateway}
        rd.rps[kind] = {"direct": 1.0, "gateway": 1.0}
        rd.cpu_ms_c1[kind] = {"direct": 0.0, "gateway": 0.5}
        rd.cpu_ms_conc[kind] = {"direct": 0.0, "gateway": 0.4}
    return [rd]


def test_the_residence_decides_the_bound_where_the_engine_s_variance_hides_the_difference() -> None:
    plan = Plan(rounds=1, warmup=0, n_c1=30, concurrency=4, n_conc=4, max_tokens=16)
    gw = summarize(_engine_bound_rounds(30, 0.002, 0.1), plan, {})["results"]["unary"]["gateway"]
    diff = gw["added_latency_ci_ms"]["p50"]
    assert diff["high"] - diff["low"] > gw["bound_ms"]["p50"]  # the difference alone decides nothing
    assert gw["residence_ci_ms"]["p50"]["estimate"] == pytest.approx(2.0)
    assert gw["residence_ci_ms"]["p95"]["high"] == pytest.approx(2.0)
    assert not over_bound(gw, "e2e", "")
    assert not over_bound(summarize(_engine_bound_rounds(30, 0.002, 0.1), plan, {})["results"]["stream"]["gateway"], "ttft", "")


def test_a_gateway_spending_more_than_the_bound_fails_on_its_residence_or_on_the_difference() -> None:
    plan = Plan(rounds=1, warmup=0, n_c1=30, concurrency=4, n_conc=4, max_tokens=16)
    slow = summarize(_engine_bound_rounds(30, 0.150, 0.1), plan, {})["results"]["unary"]["gateway"]
    in_gateway = [line.split(":")[0] for line in over_bound(slow, "e2e", "") if "time in the gateway" in line]
    assert in_gateway == ["p50", "p95"]
    # a gateway whose own clock puts 300 ms of its work into the engine's share: the black-box difference shows it
    hidden = summarize(_engine_bound_rounds(30, 0.002, 0.01, extra_s=0.300), plan, {})["results"]["unary"]["gateway"]
    assert hidden["residence_ci_ms"]["p50"]["high"] == pytest.approx(2.0)
    over = over_bound(hidden, "e2e", "")
    assert [line.split(":")[0] for line in over] == ["p50", "p95"] and all("over direct" in line for line in over)


def test_few_samples_make_p99_unreliable_and_a_negative_difference_noise() -> None:
    plan = Plan(rounds=1, warmup=0, n_c1=30, concurrency=4, n_conc=8, max_tokens=8)
    report = summarize(_rounds(30, -0.00001, rounds=1), plan, {})
    ci = report["results"]["unary"]["gateway"]["added_latency_ci_ms"]
    assert not ci["p99"]["reliable"] and ci["p95"]["noise"]
    text = render(report)
    assert "UNRELIABLE (n=30 < 100)" in text
    assert "noise (negative: not a speed-up)" in text


@pytest.mark.integration
@pytest.mark.slow
def test_overhead_benchmark_runs_all_arms_on_the_fake_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from certify.perf.bench import main

    if nginx_binary() is None:
        missing("nginx", "nginx is not installed (make nginx): the benchmark's native relay arm")
    out = tmp_path / "overhead.json"
    argv = ["--rounds", "1", "--requests", "3", "--warmup", "1", "--concurrency", "2", "--concurrent-requests", "4",
            "--max-tokens", "8", "--open-streams", "2", "--gateway-nice", "5", "--nginx", "on", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["samples_per_arm"] == 3 and report["engine"] == "fake"
    assert report["gateway_nice"] == 5  # read from the gateway process after the rounds
    for kind in ("unary", "stream"):
        section = report["results"][kind]
        assert {"direct", "gateway", "reference", "gateway_vs_reference"} <= section.keys()
        assert section["gateway"]["added_latency_ci_ms"]["p99"]["reliable"] is False
        # the three arms did the same work
        assert section["direct"]["completion_tokens"] == section["gateway"]["completion_tokens"]
        assert section["reference"]["completion_tokens"] == section["gateway"]["completion_tokens"]
        assert section["nginx"]["completion_tokens"] == section["gateway"]["completion_tokens"]
        assert section["gateway_vs_nginx"]["cpu_ratio_c1"] > 0  # both relays' CPU read from their processes
    assert report["results"]["stream"]["gateway"]["cpu_us_per_event_c1"] > 0
    assert all(0 < t <= 8 for t in report["results"]["unary"]["direct"]["completion_tokens"])
    raw = report["raw_rounds_s"][0]["c1"]["stream"]
    assert all(len(raw[arm]) == 3 for arm in ("direct", "gateway", "reference", "nginx"))
    assert report["results"]["gateway_rss_bytes_per_open_stream"] is not None
    printed = capsys.readouterr().out
    assert "UNRELIABLE (n=3 < 100)" in printed and "gateway at nice 5" in printed
    assert report["cores"] is None  # every process shared every core


@pytest.mark.integration
@pytest.mark.slow
def test_overhead_benchmark_puts_the_engine_on_its_own_cores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from certify.perf.bench import main

    usable = sorted(os.sched_getaffinity(0))
    out = tmp_path / "overhead.json"
    argv = ["--rounds", "1", "--requests", "2", "--warmup", "1", "--concurrency", "2", "--concurrent-requests", "2",
            "--max-tokens", "4", "--open-streams", "0", "--no-reference", "--engine-cores", str(usable[0]),
            "--out", str(out)]  # fmt: skip
    if len(usable) < 2:  # nothing left for the gateway: refused before anything starts
        with pytest.raises(SystemExit, match="leaves no usable core"):
            main(argv)
        return
    assert main(argv) == 0
    cores = json.loads(out.read_text())["cores"]  # read back from the processes as they ran
    assert cores == {"engine": [usable[0]], "gateway": usable[1:], "load": usable[1:]}
    assert f"engine on cores {usable[0]}, gateway on {','.join(map(str, usable[1:]))}" in capsys.readouterr().out
    assert sorted(os.sched_getaffinity(0)) == usable  # this process's own mask is given back


def test_engine_cores_outside_the_usable_set_are_refused() -> None:
    from certify.perf.stack import split_cores

    with pytest.raises(SystemExit, match="not among this process's usable cores"):
        split_cores((max(os.sched_getaffinity(0)) + 1,))


@pytest.mark.integration
def test_a_200_stream_with_an_in_band_error_is_never_a_served_sample(tiny_model: Path, tmp_path: Path) -> None:
    import asyncio

    import aiohttp

    from certify.perf.loops import Arm, one
    from certify.perf.stack import MODEL, caller_body
    from fixtures.fake_sglang.client import start_fake_engine

    fake = start_fake_engine(tiny_model, tmp_path, served=MODEL)
    try:
        fake.faults("inband_error:after=1")
        body = {"stream": caller_body("stream", 8)}
        arm = Arm("direct", fake.base + "/v1/chat/completions", {**fake.headers(), "Content-Type": "application/json"}, body)

        async def go() -> None:
            async with aiohttp.ClientSession() as session:
                await one(session, arm, "stream", {})

        with pytest.raises(AssertionError, match="in-band error after 200"):
            asyncio.run(go())
    finally:
        fake.stop()


@pytest.mark.integration
@pytest.mark.slow
def test_a_terminated_benchmark_stops_its_engine_and_gateway(tmp_path: Path) -> None:
    """SIGTERM (``timeout``, a CI job's end) unwinds the benchmark: nothing it started outlives it, the engine
    included, which runs in its own process group."""
    import contextlib
    import subprocess
    import sys
    import time

    import psutil

    log = tmp_path / "bench.log"
    argv = [sys.executable, "-m", "certify.perf", "--rounds", "50", "--requests", "50", "--warmup", "1",
            "--max-tokens", "4", "--no-reference", "--open-streams", "0"]  # fmt: skip
    with log.open("wb") as sink:
        bench = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while b"round 1/50 done" not in log.read_bytes():
            assert bench.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        started = psutil.Process(bench.pid).children(recursive=True)
        assert len(started) >= 2  # the fake engine and the gateway, at least
        bench.terminate()
        assert bench.wait(60) == 128 + 15, log.read_text()[-4000:]
        _, alive = psutil.wait_procs(started, timeout=10)
        assert alive == []
    finally:  # a failing run leaves nothing behind either
        if bench.poll() is None:
            bench.kill()
            bench.wait(10)
        for proc in started:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def test_sigterm_inside_a_transport_callback_still_ends_the_benchmark_with_143() -> None:
    """A SIGTERM that lands while the loop runs a protocol callback must not become a broken connection.

    Raising ``SystemExit`` from the handler there made uvloop hand it to ``connection_lost``; aiohttp wraps
    that in ``ClientPayloadError``, so a terminated bench exited 1 (seen in CI). The protocol here wraps it
    the same way and sends the SIGTERM from its own ``data_received``: deterministic, no timing."""
    import asyncio
    import signal

    from certify.perf.bench import Termination

    async def read_until_terminated() -> None:
        async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                for _ in range(1000):
                    writer.write(b"x" * 100)
                    await writer.drain()
                    await asyncio.sleep(0.001)
            finally:
                writer.close()

        loop = asyncio.get_running_loop()
        lost: asyncio.Future[None] = loop.create_future()

        class Client(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                os.kill(os.getpid(), signal.SIGTERM)

            def connection_lost(self, exc: Exception | None) -> None:
                if not lost.done():  # as aiohttp does: the cause becomes a payload error
                    lost.set_exception(ConnectionError(f"payload not completed: {exc!r}")) if exc else lost.set_result(None)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        async with server:
            transport, _ = await loop.create_connection(Client, "127.0.0.1", server.sockets[0].getsockname()[1])
            try:
                await lost
            finally:
                transport.close()

    termination = Termination()
    previous = signal.signal(signal.SIGTERM, termination.handle)
    try:
        with pytest.raises(SystemExit) as raised:  # before the fix: ConnectionError
            termination.run(read_until_terminated())
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert raised.value.code == 128 + signal.SIGTERM


def test_the_gateway_beside_nginx_gives_cpu_per_content_event_and_whether_it_is_decided_above() -> None:
    rounds = _rounds(30, 0.002)
    for rd in rounds:  # nginx: the direct samples plus 0.2 ms, a quarter of the gateway's CPU
        for kind in ("unary", "stream"):
            rd.c1[kind]["nginx"] = [Sample(s.e2e + 0.0002, s.ttft, s.itl, s.tokens) for s in rd.c1[kind]["direct"]]
            rd.rps[kind]["nginx"] = 99.0
            rd.cpu_ms_c1[kind]["nginx"], rd.cpu_ms_conc[kind]["nginx"] = 0.125, 0.1
        rd.cpu_ticks_ms_c1["stream"] = {"direct": 0.0, "gateway": 0.0 if rd is rounds[0] else 1.0, "nginx": 0.25}
    plan = Plan(rounds=2, warmup=0, n_c1=30, concurrency=4, n_conc=8, max_tokens=8)
    report = summarize(rounds, plan, {})
    stream = report["results"]["stream"]
    assert stream["gateway"]["cpu_us_per_event_c1"] == pytest.approx(0.5 * 1000 / 8)  # 8 content events per stream
    assert stream["nginx"]["cpu_us_per_event_c32"] == pytest.approx(0.1 * 1000 / 8)
    versus = stream["gateway_vs_nginx"]
    assert versus["cpu_unit"] == "cpu_us_per_event"
    assert (versus["cpu_ratio_c1"], versus["cpu_ratio_c32"]) == (pytest.approx(4.0), pytest.approx(4.0))
    assert versus["added_p50_decided_above_nginx"] is True  # +2 ms against +0.2 ms, every pair alike
    # ticks are 10 ms steps: their figure is the mean over rounds (0 and 1 ms: 0.5 ms a stream, 62.5 us an event)
    assert stream["gateway"]["cpu_ticks_us_per_event_c1"] == pytest.approx(62.5)
    assert versus["cpu_ticks_ratio_c1"] == pytest.approx(2.0)
    assert versus["cpu_ratio_c1_ci"] == {"estimate": 4.0, "low": 4.0, "high": 4.0, "n": 2}  # every round alike
    assert report["results"]["unary"]["gateway_vs_nginx"]["cpu_unit"] == "cpu_ms_per_request"
    text = render(report)
    assert "gateway/nginx: CPU per event 4.00x (c=1) [4.00, 4.00] over the rounds' totals, 4.00x (c=C) (target <= 1.50x)" in text
    assert "decided above nginx's" in text and "CPU per content event 62.5 us (c=1)" in text


def test_a_stream_only_measurement_without_the_concurrent_loop_leaves_its_figures_unmeasured() -> None:
    rounds = _rounds(30, 0.002)
    for rd in rounds:  # what measure() leaves for --kinds stream --concurrent-requests 0
        del rd.c1["unary"], rd.cpu_ms_c1["unary"]
        rd.rps, rd.cpu_ms_conc = {"stream": {}}, {"stream": {}}
    plan = Plan(rounds=2, warmup=0, n_c1=30, concurrency=4, n_conc=0, max_tokens=8, kinds=("stream",))
    report = summarize(rounds, plan, {})
    assert set(report["results"]) == {"stream"}
    gw = report["results"]["stream"]["gateway"]
    assert gw["rps_c32"] is None and gw["cpu_us_per_event_c32"] is None and gw["cpu_us_per_event_c1"] == pytest.approx(62.5)
    text = render(report)
    assert "== unary ==" not in text and "c=C - req/s" in text
