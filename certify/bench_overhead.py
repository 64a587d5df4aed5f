"""Gateway overhead benchmark: direct vs gateway vs bare reference proxy, interleaved (issue 5, item 9).

Owns ``python -m certify.bench_overhead``. Three arms hit the same engine with the same work: **direct** (engine
URL and key, the body the gateway would send), **gateway** (a separate ``python -m gateway`` process, the
caller's body; the gateway applies the lock), **reference** (a separate bare aiohttp+uvloop pass-through,
:mod:`gateway.reference_proxy`, the Python floor). Each round runs, for stream and non-stream chat, every
arm in a rotated order at concurrency 1 (``--requests`` sequential requests) and at concurrency 32 (for
``--seconds``). Reported per arm, as medians over rounds of the per-round figure:

- added latency p50/p95/p99 = percentile(arm) - percentile(direct) of end-to-end time (c=1), and the same
  over the samples of all rounds pooled (``rounds x --requests`` per arm) with bootstrap 95 % intervals
  (:func:`certify.stats.added_intervals`; a p99 from < 100 samples is marked unreliable, an interval
  holding 0 is noise),
- TTFT added p50/p95 (streams; client-side first content event), likewise with intervals,
- throughput at c=32 and its ratios gateway/direct and gateway/reference,
- CPU ms per request of the proxy process (psutil, c=32 window and c=1 window),
- gateway RSS per open stream (``--open-streams`` streams held open by the fake's stall fault).

Figures go to stdout and, with ``--out``, to a JSON file. Targets (fake engine, our machines): added p50
<= 0.8 ms and p99 <= 2.5 ms at c=1, TTFT added p50 <= 0.8 ms, CPU <= 1.5x reference, c=32 throughput >=
0.8x reference. A benchmark prints figures; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp
import psutil
import uvloop

from certify.processes import stop_process
from certify.session import FakeControl
from certify.stats import added_intervals, percentile
from gateway.policy import apply_policy
from harness.contracts.lock import InferenceLockV1
from harness.net import free_port

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
ARMS = ("direct", "gateway", "reference")
MODEL = "bench-model"


@dataclass
class Arm:
    name: str
    url: str
    token: str
    body: dict[str, bytes]  # "stream" / "unary" -> request bytes
    pid: int | None


def _wait_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 240.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early ({proc.returncode})")
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text())
            return data
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {path}")


def _bench_lock(permits: int, model_dir: Path, work: Path, benchmark: bool = False) -> InferenceLockV1:
    """A real draft lock: the benchmark's checkpoint imported into a scratch root, the generic-CPU runtime."""
    from harness.lock import build_lock
    from harness.paths import HitchRoot
    from harness.runtimes import get_runtime
    from harness.store import import_model

    manifest = import_model(HitchRoot(work / "root"), model_dir, "bench").manifest
    lock = build_lock(
        manifest,
        get_runtime("sglang-0.5.23-cpu-generic"),
        device="cpu",
        profile="baseline",
        cpu_cores_per_node=2,
        context_tokens=2048,
        benchmark=benchmark,
    )
    # The benchmark sizes admission to its concurrency arm; the gateway enforces whatever the lock says.
    ex = lock.execution.model_copy(update={"max_running_requests": permits, "queue_timeout_ms": 600_000})
    gen = lock.generation.model_copy(update={"max_output_tokens": 64})
    return lock.model_copy(update={"execution": ex, "generation": gen})


@contextmanager
def _stack(args: argparse.Namespace, work: Path) -> Iterator[tuple[list[Arm], dict[str, Any]]]:
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        model_dir = Path(args.model_dir) if args.model_dir else _tiny_model(work)
        key = "ek-" + secrets.token_urlsafe(24)
        key_file = work / "private" / "engine.key"
        key_file.parent.mkdir(mode=0o700, exist_ok=True)
        key_file.write_text(key)
        key_file.chmod(0o600)
        port = free_port()
        ctl_token = secrets.token_urlsafe(16)
        ctl_file = work / "private" / "ctl.token"
        ctl_file.write_text(ctl_token)
        ctl_file.chmod(0o600)
        permits = max(64, args.open_streams + 8)
        common = ["--model-path", str(model_dir), "--port", str(port), "--served-model-name", MODEL, "--api-key", key]
        if args.engine == "fake":
            cmd = [sys.executable, "-m", "fixtures.fake_sglang", *common, "--max-running-requests", str(permits),
                   *FakeControl.launch_flags(work / "ctl.port", ctl_file), "--fake-stop-after", "0"]  # fmt: skip
            engine_env = env
        else:
            from fixtures.fake_sglang.parity_engines import sglang_command

            command = sglang_command()
            if command is None:
                raise SystemExit("--engine sglang: the generic-CPU SGLang runtime is not installed under HITCH_ROOT")
            cmd = [*command.argv, *common, "--device", "cpu", "--attention-backend", "torch_native",
                   "--sampling-backend", "pytorch", "--mem-fraction-static", "0.05", "--max-total-tokens", "8192",
                   "--context-length", "2048", "--dtype", "bfloat16", "--max-running-requests", str(permits)]  # fmt: skip
            engine_env = {**env, **command.env}
        log = (work / "engine.log").open("wb")
        logs.append(log)
        engine = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=engine_env, start_new_session=True)
        procs.append(engine)
        engine_url = f"http://127.0.0.1:{port}"
        _wait_http(engine_url + "/health", engine)

        # certify.external runs the field's tools, which send ignore_eos: their stack gets a benchmark lock
        lock = _bench_lock(permits, model_dir, work, benchmark=getattr(args, "benchmark_lock", False))
        lock_file = work / "lock.json"
        lock_file.write_text(lock.model_dump_json())
        spec = {
            "state_dir": str(work / "gw"),
            "capture": args.capture,
            "targets": [
                {
                    "base_url": engine_url,
                    "engine_key_file": str(key_file),
                    "service_id": "bench",
                    "epoch": 1,
                    "lock_file": str(lock_file),
                    "wire_model": MODEL,
                    "tokenizer_dir": str(model_dir),
                }
            ],
            "runs": [{"run_id": "bench-run", "target": 0}],
            "ready_file": str(work / "gw.ready"),
        }
        (work / "gw.spec").write_text(json.dumps(spec))
        spec_arg = str(work / "gw.spec")
        if args.profile_gateway:  # CPU-time profile of the gateway's loop thread
            code = (
                "import cProfile, sys, time\nfrom gateway.standalone import main\n"
                "pr = cProfile.Profile(time.thread_time)\npr.enable()\n"
                f"main(['--spec', {spec_arg!r}])\npr.disable()\npr.dump_stats({args.profile_gateway!r})\n"
            )
            gw_cmd = [sys.executable, "-c", code]
        else:
            gw_cmd = [sys.executable, "-m", "gateway", "--spec", spec_arg]
        gw = subprocess.Popen(gw_cmd, cwd=REPO, env=env)
        procs.append(gw)
        ready = _wait_file(work / "gw.ready", gw)
        binding = ready["bindings"][0]
        run_token = Path(binding["token_ref"]).read_text()

        ref_token = secrets.token_urlsafe(24)
        ref_token_file = work / "private" / "ref.token"
        ref_token_file.write_text(ref_token)
        ref_token_file.chmod(0o600)
        ref = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.reference_proxy",
                "--upstream",
                engine_url,
                "--engine-key-file",
                str(key_file),
                "--token-file",
                str(ref_token_file),
                "--ready-file",
                str(work / "ref.ready"),
            ],
            cwd=REPO,
            env=env,
        )
        procs.append(ref)
        ref_url = _wait_file(work / "ref.ready", ref)["base_url"]

        def caller(stream: bool) -> dict[str, Any]:
            return {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Write one short line."}],
                "max_tokens": 16,
                "stream": stream,
            }

        def policy_body(stream: bool) -> bytes:
            return apply_policy("/v1/chat/completions", json.dumps(caller(stream)).encode(), lock, MODEL).body

        sent = {"stream": policy_body(True), "unary": policy_body(False)}
        raw = {"stream": json.dumps(caller(True)).encode(), "unary": json.dumps(caller(False)).encode()}
        arms = [
            Arm("direct", engine_url + "/v1", key, sent, None),
            Arm("gateway", binding["base_url"], run_token, raw, gw.pid),
            Arm("reference", ref_url + "/v1", ref_token, sent, ref.pid),
        ]
        ctl = {"port_file": work / "ctl.port", "token": ctl_token} if args.engine == "fake" else {}
        yield arms, {"engine_pid": engine.pid, "ctl": ctl, "gateway_metrics": ready["metrics_url"]}
    finally:
        for p in reversed(procs):
            stop_process(p, 10)
        for f in logs:
            f.close()


def _tiny_model(work: Path) -> Path:
    from fixtures.checkpoint import tiny_checkpoint_cached

    return tiny_checkpoint_cached(Path(tempfile.gettempdir()) / "hitch-bench-ckpt")


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"engine exited early ({proc.returncode})")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("engine not ready")


async def _one(session: aiohttp.ClientSession, arm: Arm, kind: str) -> tuple[float, float | None]:
    headers = {"Authorization": "Bearer " + arm.token, "Content-Type": "application/json"}
    t0 = time.perf_counter()
    ttft = None
    async with session.post(arm.url + "/chat/completions", data=arm.body[kind], headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{arm.name}: HTTP {resp.status}: {(await resp.read())[:200]!r}")
        if kind == "unary":
            await resp.read()
        else:
            seen = b""
            async for chunk in resp.content.iter_any():
                if ttft is None:
                    seen += chunk
                    i = seen.find(b'"content":"')
                    while i >= 0:
                        if seen[i + 11 : i + 12] not in (b'"', b""):
                            ttft = time.perf_counter() - t0
                            break
                        i = seen.find(b'"content":"', i + 11)
    return time.perf_counter() - t0, ttft


def _cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


async def _c1(session: aiohttp.ClientSession, arm: Arm, kind: str, n: int) -> dict[str, Any]:
    for _ in range(5):
        await _one(session, arm, kind)
    lat: list[float] = []
    ttft: list[float] = []
    cpu0 = _cpu(arm.pid)
    for _ in range(n):
        e2e, t = await _one(session, arm, kind)
        lat.append(e2e)
        if t is not None:
            ttft.append(t)
    return {"lat": lat, "ttft": ttft, "cpu_ms_per_req": (_cpu(arm.pid) - cpu0) * 1000 / n}


async def _c32(session: aiohttp.ClientSession, arm: Arm, kind: str, seconds: float) -> dict[str, Any]:
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await _one(session, arm, kind)
            done += 1

    cpu0 = _cpu(arm.pid)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(32)))
    elapsed = time.perf_counter() - t0
    return {"rps": done / elapsed, "cpu_ms_per_req": (_cpu(arm.pid) - cpu0) * 1000 / max(done, 1)}


async def _open_streams(arm: Arm, info: dict[str, Any], n: int) -> float | None:
    """Gateway RSS growth per open stream, streams held open by the fake's stall fault."""
    ctl = info["ctl"]
    if not ctl or arm.pid is None or n <= 0:
        return None
    ctl_url = f"http://127.0.0.1:{Path(ctl['port_file']).read_text().strip()}"
    auth = {"Authorization": "Bearer " + ctl["token"]}
    proc = psutil.Process(arm.pid)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await session.post(ctl_url + "/faults", json={"clear": True, "add": ["stall_mid_stream:t=20,after=2"]}, headers=auth)
        rss0 = proc.memory_info().rss
        headers = {"Authorization": "Bearer " + arm.token, "Content-Type": "application/json"}
        responses = []
        for _ in range(n):
            resp = await session.post(arm.url + "/chat/completions", data=arm.body["stream"], headers=headers)
            await resp.content.readany()
            responses.append(resp)
        await asyncio.sleep(0.5)
        rss1 = proc.memory_info().rss
        for resp in responses:
            resp.close()
        await session.post(ctl_url + "/faults", json={"clear": True}, headers=auth)
    return float(rss1 - rss0) / n


async def _run(args: argparse.Namespace, arms: list[Arm], info: dict[str, Any]) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    by_name = {a.name: a for a in arms}
    for r in range(args.rounds):
        order = ARMS[r % 3 :] + ARMS[: r % 3]
        result: dict[str, Any] = {}
        for kind in ("unary", "stream"):
            per: dict[str, Any] = {}
            for name in order:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                    per[name] = {"c1": await _c1(session, by_name[name], kind, args.requests)}
                    per[name]["c32"] = await _c32(session, by_name[name], kind, args.seconds)
            result[kind] = per
        rounds.append(result)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    streams_rss = await _open_streams(by_name["gateway"], info, args.open_streams)
    return _summarize(rounds, streams_rss)


_QS = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def _pooled_intervals(rounds: list[dict[str, Any]], kind: str, arm: str, field: str) -> dict[str, dict[str, Any]]:
    direct = [v for rd in rounds for v in rd[kind]["direct"]["c1"][field]]
    other = [v for rd in rounds for v in rd[kind][arm]["c1"][field]]
    return added_intervals(direct, other, _QS, scale=1000.0)


def _summarize(rounds: list[dict[str, Any]], rss_per_stream: float | None) -> dict[str, Any]:
    med = statistics.median
    out: dict[str, Any] = {}
    for kind in ("unary", "stream"):
        section: dict[str, Any] = {}
        for arm in ("gateway", "reference"):
            added = {
                f"p{int(q * 100)}": med(
                    (percentile(rd[kind][arm]["c1"]["lat"], q) - percentile(rd[kind]["direct"]["c1"]["lat"], q)) * 1000
                    for rd in rounds
                )
                for q in (0.5, 0.95, 0.99)
            }
            entry: dict[str, Any] = {"added_latency_ms": added}
            entry["added_latency_ci_ms"] = _pooled_intervals(rounds, kind, arm, "lat")
            if kind == "stream":
                entry["ttft_added_ci_ms"] = _pooled_intervals(rounds, kind, arm, "ttft")
                entry["ttft_added_ms"] = {
                    f"p{int(q * 100)}": med(
                        (percentile(rd[kind][arm]["c1"]["ttft"], q) - percentile(rd[kind]["direct"]["c1"]["ttft"], q)) * 1000
                        for rd in rounds
                    )
                    for q in (0.5, 0.95, 0.99)
                }
            entry["rps_c32"] = med(rd[kind][arm]["c32"]["rps"] for rd in rounds)
            entry["throughput_ratio_vs_direct_c32"] = med(
                rd[kind][arm]["c32"]["rps"] / rd[kind]["direct"]["c32"]["rps"] for rd in rounds
            )
            entry["cpu_ms_per_request_c32"] = med(rd[kind][arm]["c32"]["cpu_ms_per_req"] for rd in rounds)
            entry["cpu_ms_per_request_c1"] = med(rd[kind][arm]["c1"]["cpu_ms_per_req"] for rd in rounds)
            section[arm] = entry
        g, ref = section["gateway"], section["reference"]
        section["direct"] = {
            "p50_ms": med(percentile(rd[kind]["direct"]["c1"]["lat"], 0.5) * 1000 for rd in rounds),
            "rps_c32": med(rd[kind]["direct"]["c32"]["rps"] for rd in rounds),
        }
        section["gateway_vs_reference"] = {
            "throughput_ratio_c32": med(rd[kind]["gateway"]["c32"]["rps"] / rd[kind]["reference"]["c32"]["rps"] for rd in rounds),
            "cpu_ratio_c32": g["cpu_ms_per_request_c32"] / ref["cpu_ms_per_request_c32"]
            if ref["cpu_ms_per_request_c32"]
            else None,
        }
        out[kind] = section
    out["gateway_rss_bytes_per_open_stream"] = rss_per_stream
    return out


def _interval_text(p: str, c: dict[str, Any]) -> str:
    if c["estimate"] is None:
        return f"{p} -"
    text = f"{p} {c['estimate']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}] ms n={c['n']}"
    if c["noise"]:
        text += " (noise)"
    if not c["reliable"]:
        text += " (unreliable)"
    return text


def _print(summary: dict[str, Any]) -> None:
    for kind in ("unary", "stream"):
        s = summary[kind]
        print(f"\n== {kind} (chat completions, 16 output tokens) ==")
        print(f"direct: p50 {s['direct']['p50_ms']:.2f} ms, c=32 {s['direct']['rps_c32']:.0f} req/s")
        for arm in ("gateway", "reference"):
            e = s[arm]
            a = e["added_latency_ms"]
            line = f"{arm:9s} added p50/p95/p99 {a['p50']:.2f}/{a['p95']:.2f}/{a['p99']:.2f} ms"
            if "ttft_added_ms" in e:
                t = e["ttft_added_ms"]
                line += f" | TTFT added p50/p95 {t['p50']:.2f}/{t['p95']:.2f} ms"
            print(line)
            for label, key in (("added", "added_latency_ci_ms"), ("TTFT added", "ttft_added_ci_ms")):
                if key in e:
                    print(f"{'':9s} {label} (pooled) " + "; ".join(_interval_text(p, c) for p, c in e[key].items()))
            line = f"{'':9s}"
            line += (
                f" | c=32 {e['rps_c32']:.0f} req/s ({e['throughput_ratio_vs_direct_c32']:.2f}x direct)"
                f" | CPU {e['cpu_ms_per_request_c32']:.2f} ms/req (c=32), {e['cpu_ms_per_request_c1']:.2f} (c=1)"
            )
            print(line)
        gr = s["gateway_vs_reference"]
        cpu_ratio = gr["cpu_ratio_c32"]
        print(f"gateway/reference: throughput {gr['throughput_ratio_c32']:.2f}x, CPU {cpu_ratio:.2f}x" if cpu_ratio else "")
    rss = summary["gateway_rss_bytes_per_open_stream"]
    if rss is not None:
        print(f"\ngateway memory per open stream: {rss / 1024:.1f} KiB")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m certify.bench_overhead", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--engine", choices=["fake", "sglang"], default="fake")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=300, help="sequential requests per arm per round at c=1")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each c=32 phase")
    p.add_argument("--open-streams", type=int, default=100)
    p.add_argument("--capture", choices=["off", "metadata", "full"], default="off")
    p.add_argument("--model-dir", default=None, help="checkpoint dir (default: the tiny fixture)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--profile-gateway", default=None, help="write a cProfile of the gateway process to this file")
    args = p.parse_args(argv)
    if args.rounds < 5:
        print("note: fewer than 5 rounds; figures are indicative only", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="hitch-bench-") as tmp, _stack(args, Path(tmp)) as (arms, info):
        summary = uvloop.run(_run(args, arms, info))
    report = {
        "schema_version": "1",
        "kind": "gateway-overhead",
        "engine": args.engine,
        "rounds": args.rounds,
        "requests_c1": args.requests,
        "seconds_c32": args.seconds,
        "capture": args.capture,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "targets": {
            "added_p50_ms": 0.8,
            "added_p99_ms": 2.5,
            "ttft_added_p50_ms": 0.8,
            "cpu_vs_reference": 1.5,
            "throughput_vs_reference_c32": 0.8,
        },
        "results": summary,
    }
    _print(summary)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
