"""Benchmark the fake and real SGLang engines launched with identical flags (no gateway).

For each engine: time to ready (spawn -> ``/health`` 200) over ``--launches`` launches, then on the last
launch ``--warmup`` + ``--requests`` non-stream chat requests with ``max_tokens: 16`` one after another,
reporting the median (and p90) latency. Prints a table and writes JSON to ``--out``.

    .venv/bin/python scripts/bench_engines.py --out /tmp/bench-engines.json [--engines fake,sglang]

Real SGLang comes from the installed ``sglang-0.5.23-cpu-generic`` runtime under HITCH_ROOT; when it is
not installed it is reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from certify.kit.engines import sglang_command
from fixtures.checkpoint import tiny_checkpoint_cached
from fixtures.fake_sglang.parity_engines import EngineCommand, fake_command, launch_engine, parity_flags

API_KEY = "sk-bench-api"
ADMIN_KEY = "sk-bench-admin"
SCHEMA_VERSION = "1"


def _chat_latencies(base: str, warmup: int, count: int) -> list[float]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16, "temperature": 0.0}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    out: list[float] = []
    with httpx.Client(timeout=120.0) as client:
        for i in range(warmup + count):
            t0 = time.perf_counter()
            r = client.post(f"{base}/v1/chat/completions", json=body, headers=headers)
            elapsed = time.perf_counter() - t0
            r.raise_for_status()
            if i >= warmup:
                out.append(elapsed)
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_engine(command: EngineCommand, checkpoint: Path, logs: Path, launches: int, warmup: int, count: int) -> dict[str, Any]:
    ready: list[float] = []
    latencies: list[float] = []
    for i in range(launches):
        engine = launch_engine(command, checkpoint, logs, API_KEY, ADMIN_KEY, ready_timeout_s=300.0)
        try:
            assert engine.ready_after_s is not None
            ready.append(engine.ready_after_s)
            if i == launches - 1:
                latencies = _chat_latencies(engine.base, warmup, count)
        finally:
            engine.stop()
    return {
        "engine": command.name,
        "time_to_ready_s": ready,
        "time_to_ready_median_s": statistics.median(ready),
        "chat16_latencies_s": latencies,
        "chat16_median_s": statistics.median(latencies),
        "chat16_p90_s": _quantile(latencies, 0.9),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    ap.add_argument("--engines", default="fake,sglang", help="comma list of fake, sglang")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--checkpoint-cache", type=Path, default=Path(tempfile.gettempdir()) / "hitch-bench-ckpt")
    args = ap.parse_args(argv)

    checkpoint = tiny_checkpoint_cached(args.checkpoint_cache)
    logs = Path(tempfile.mkdtemp(prefix="bench-engines-logs-"))
    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for name in [n.strip() for n in args.engines.split(",") if n.strip()]:
        command = fake_command() if name == "fake" else sglang_command() if name == "sglang" else None
        if command is None:
            skipped[name] = "unknown engine" if name not in ("fake", "sglang") else "runtime not installed under HITCH_ROOT"
            continue
        print(f"benchmarking {name} ...", file=sys.stderr, flush=True)
        results.append(bench_engine(command, checkpoint, logs, args.launches, args.warmup, args.requests))

    report = {
        "schema_version": SCHEMA_VERSION,
        "kind": "engine_bench",
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "processor": platform.processor()},
        "flags": parity_flags(checkpoint, 0, "<api-key>", "<admin-key>"),
        "launches": args.launches,
        "warmup": args.warmup,
        "requests": args.requests,
        "results": results,
        "skipped": skipped,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'engine':8} {'ready median s':>15} {'ready runs s':>24} {'chat16 median ms':>17} {'chat16 p90 ms':>14}")
    for r in results:
        runs = ",".join(f"{v:.2f}" for v in r["time_to_ready_s"])
        print(
            f"{r['engine']:8} {r['time_to_ready_median_s']:15.2f} {runs:>24} "
            f"{r['chat16_median_s'] * 1000:17.1f} {r['chat16_p90_s'] * 1000:14.1f}"
        )
    for name, why in skipped.items():
        print(f"{name:8} skipped: {why}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
