"""How often the comparison rule says each verdict: false ``differs`` on the same engine, power against a slower one.

``.venv/bin/python scripts/bench_reproduce.py [--reps 20] [--requests 30] [--ttft-ms 100] [--itl-ms 10]
[--slowdown 0.10] [--json-out FILE]``

Each repetition measures a *baseline* run, a *reproduction* on the same engine settings and a run on an engine
``--slowdown`` slower (its own latency knobs, ``--fake-ttft-ms`` / ``--fake-itl-ms`` times 1 + slowdown); every
run is a fresh fake engine process (the tiny checkpoint) answering ``--requests`` streamed chat requests one at
a time (16 output tokens). Each pair is decided exactly as ``hitch run compare`` decides (the same figures:
end-to-end time and time to first token as ``latency``, input and output tokens as ``token_count``;
:func:`harness.compare.figures.decide_figures`: equivalence against the margins, Holm over the figures).

Printed (and written to ``--json-out``): per condition the count of each verdict, the figures named
``differs``, and for inconclusive figures the samples a side that would decide them. What it does not cover:
the gateway and the daemon are not in the path (the figures are the client's, straight from the engine), and
no signed entry is reproduced (``hitch catalog reproduce`` decides entries by the same :func:`decide`).
Figures measured on a shared or loaded machine carry that load: say so beside them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fixtures.checkpoint import tiny_checkpoint_cached  # noqa: E402
from fixtures.fake_sglang.client import start_fake_engine  # noqa: E402
from harness.compare.figures import Figure, decide_figures, sample_figure  # noqa: E402
from harness.compare.runs import rule_json  # noqa: E402
from harness.sse import SseParser  # noqa: E402

OUTPUT_TOKENS = 16


def _one(client: httpx.Client, url: str, headers: dict[str, str], served: str) -> dict[str, float]:
    body = {"model": served, "messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": OUTPUT_TOKENS,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    parser, ttft, usage = SseParser(), None, dict[str, Any]()
    start = time.perf_counter()
    with client.stream("POST", url, json=body, headers=headers) as r:
        r.raise_for_status()
        for chunk in r.iter_bytes():
            for _, data in parser.feed(chunk):
                if data == b"[DONE]":
                    continue
                event = json.loads(data)
                if ttft is None and any((c.get("delta") or {}).get("content") for c in event.get("choices") or []):
                    ttft = (time.perf_counter() - start) * 1000
                usage = event.get("usage") or usage
    e2e = (time.perf_counter() - start) * 1000
    tokens = {"input_tokens": float(usage.get("prompt_tokens", 0)), "output_tokens": float(usage.get("completion_tokens", 0))}
    return {"e2e_ms": e2e, "ttft_ms": ttft if ttft is not None else e2e, **tokens}


def measure(model_dir: Path, work: Path, ttft_ms: float, itl_ms: float, requests: int) -> list[dict[str, float]]:
    """One run: a fresh fake engine with these latency knobs, ``requests`` streamed requests one at a time."""
    engine = start_fake_engine(model_dir, work, "--fake-ttft-ms", str(ttft_ms), "--fake-itl-ms", str(itl_ms))
    try:
        url = f"http://127.0.0.1:{engine.port}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {engine.api_key}"}
        with httpx.Client(timeout=60, trust_env=False) as client:
            _one(client, url, headers, engine.served)  # the first request warms the client's connection
            return [_one(client, url, headers, engine.served) for _ in range(requests)]
    finally:
        engine.stop()


KINDS = (("e2e_ms", "ms", "latency"), ("ttft_ms", "ms", "latency"), ("input_tokens", "tokens", "token_count"),
         ("output_tokens", "tokens", "token_count"))  # fmt: skip


def compare(a: list[dict[str, float]], b: list[dict[str, float]]) -> tuple[str, list[Figure]]:
    figures = decide_figures([sample_figure(n, u, k, [r[n] for r in a], [r[n] for r in b]) for n, u, k in KINDS])  # type: ignore[arg-type]
    verdicts = {f.verdict for f in figures}
    overall = "differs" if "differs" in verdicts else "inconclusive" if "inconclusive" in verdicts else "reproduced"
    return overall, figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--slowdown", type=float, default=0.10)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    tally: dict[str, Counter[str]] = {"same_engine": Counter(), "slower_engine": Counter()}
    named: dict[str, Counter[str]] = {"same_engine": Counter(), "slower_engine": Counter()}
    needed: list[int] = []
    shifts: list[float] = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-reproduce-") as tmp:
        model_dir = tiny_checkpoint_cached(Path(tmp) / "ckpt")
        slow = 1 + args.slowdown
        for rep in range(args.reps):
            work = Path(tmp) / f"rep{rep}"
            base = measure(model_dir, work / "a", args.ttft_ms, args.itl_ms, args.requests)
            again = measure(model_dir, work / "b", args.ttft_ms, args.itl_ms, args.requests)
            slower = measure(model_dir, work / "c", args.ttft_ms * slow, args.itl_ms * slow, args.requests)
            for cond, other in (("same_engine", again), ("slower_engine", slower)):
                verdict, figures = compare(base, other)
                tally[cond][verdict] += 1
                named[cond].update(f.name for f in figures if f.verdict == "differs")
                needed += [f.decision.samples_needed for f in figures if f.decision and f.decision.samples_needed]
            shifts.append(statistics.median(r["e2e_ms"] for r in slower) / statistics.median(r["e2e_ms"] for r in base) - 1)
            print(f"rep {rep + 1}/{args.reps}: same {compare(base, again)[0]}, slower {compare(base, slower)[0]}", flush=True)
    result: dict[str, Any] = {
        "reps": args.reps, "requests_per_run": args.requests, "ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms,
        "output_tokens": OUTPUT_TOKENS, "slowdown": args.slowdown, "verdicts": {k: dict(v) for k, v in tally.items()},
        "figures_named_differs": {k: dict(v) for k, v in named.items()},
        "measured_e2e_shift_median": statistics.median(shifts) if shifts else None,
        "samples_needed_when_inconclusive": sorted(needed), "rule": rule_json(), "wall_s": round(time.time() - started, 1),
    }  # fmt: skip
    print(json.dumps(result, indent=1))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
