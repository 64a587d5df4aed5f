"""The field's own benchmark tools, gateway vs direct: ``python -m certify.external``.

Run by ``hitch bench external --tool bench_serving``. The stack is :mod:`certify.perf.stack`'s (the fake
engine or the generic-CPU SGLang runtime, our gateway as a separate process with one registered run) with a
**benchmark lock** (``generation.benchmark_controls``: the tool's ``ignore_eos`` passes). Both arms get the
same stock tool invocation, in interleaved rounds (the first arm alternates per round), with identical
requests (same dataset, seed and lengths): *direct* is the engine's URL and key, *gateway* the run's base
URL and token.

``bench_serving`` quirks, as measured on SGLang 0.5.23's copy (run from the installed runtime's venv):

- the URL is given **without** ``/v1`` (the chat backend appends ``/v1/chat/completions``; its readiness
  probe is ``/v1/models``);
- the key is read from ``OPENAI_API_KEY`` (never argv here);
- ``--dataset-name random`` downloads ShareGPT; ``random-ids`` is used (random token ids, no network);
- it always sends ``ignore_eos`` (true, or false with ``--disable-ignore-eos``), hence the benchmark lock;
- it fetches ``/server_info`` after the run and stores it in its output; SGLang's echoes the engine's
  ``api_key`` / ``admin_api_key``, so the field is replaced by ``"stripped by hitch"`` in the kept output,
  and any engine or run key in its log is masked;
- importing it loads ``transformers`` (its tokenizer): seconds of start-up per invocation, not counted in
  its figures.

Outputs in ``--out``: ``<arm>_round<N>.jsonl`` (the tool's own JSONL with ``--output-details``),
``<arm>_round<N>.log`` (its stdout/stderr), ``summary.json`` (per arm: TTFT, ITL, E2E p50/p95/p99 ms as
the tool reports them, median over rounds; req/s; completed; errors; gateway/direct ratios) and the same
table on stdout. A benchmark prints figures; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from certify.aiperf import aiperf_command, aiperf_figures, install_aiperf, keep_aiperf_outputs
from certify.kit.engines import sglang_command
from certify.perf.stack import MODEL, StackOptions, started_stack

__all__ = ["main", "summarize"]

TOOLS = ("bench_serving", "aiperf")
ARMS = ("direct", "gateway")
FIGURES = (("ttft_ms", "ttft"), ("itl_ms", "itl"), ("e2e_ms", "e2e_latency"))
STRIPPED = "stripped by hitch (SGLang's /server_info echoes engine keys)"


def _runtime_python() -> tuple[str, dict[str, str]]:
    command = sglang_command()
    if command is None:
        raise SystemExit("bench_serving runs from the generic-CPU SGLang runtime's venv, which is not installed (make runtime)")
    return command.argv[0], command.env


def _tool_argv(python: str, base_url: str, model: str, tokenizer: str, out_file: Path, args: argparse.Namespace) -> list[str]:
    argv = [python, "-m", "sglang.bench_serving", "--backend", "sglang-oai-chat", "--base-url", base_url, "--model", model,
            "--tokenizer", tokenizer, "--dataset-name", "random-ids", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--random-range-ratio", "1.0", "--num-prompts",
            str(args.num_prompts), "--max-concurrency", str(args.max_concurrency), "--request-rate", "inf", "--seed",
            str(args.seed), "--output-file", str(out_file), "--output-details", "--disable-tqdm"]  # fmt: skip
    if args.disable_ignore_eos:
        argv.append("--disable-ignore-eos")
    return argv


def _keep(raw_file: Path, log: str, out: Path, stem: str, secrets_: list[str]) -> dict[str, Any]:
    """Write the tool's output with ``server_info`` stripped and keys masked; return its last result."""
    rows = [json.loads(line) for line in raw_file.read_text().splitlines() if line.strip()] if raw_file.exists() else []
    for row in rows:
        if "server_info" in row:
            row["server_info"] = STRIPPED
    text = "".join(json.dumps(r) + "\n" for r in rows)
    for s in secrets_:
        text, log = text.replace(s, "***"), log.replace(s, "***")
    (out / f"{stem}.jsonl").write_text(text)
    (out / f"{stem}.log").write_text(log)
    return rows[-1] if rows else {}


def _figures(result: dict[str, Any], num_prompts: int) -> dict[str, Any]:
    errors = [e for e in result.get("errors", []) or [] if e]
    completed = int(result.get("completed", 0) or 0)
    fig: dict[str, Any] = {
        name: {
            "p50": result.get(f"median_{key}_ms"),
            "p95": result.get(f"p95_{key}_ms"),
            "p99": result.get(f"p99_{key}_ms"),
        }
        for name, key in FIGURES
    }
    fig["req_per_s"] = result.get("request_throughput")
    fig["completed"] = completed
    fig["errors"] = max(len(errors), num_prompts - completed)
    fig["output_tokens"] = result.get("total_output_tokens")
    return fig


def _median(values: list[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.median(nums) if nums else None


def summarize(per_round: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per arm: each figure's median over rounds; errors and completions summed; gateway/direct ratios."""
    arms: dict[str, Any] = {}
    for arm, rounds in per_round.items():
        entry: dict[str, Any] = {
            name: {p: _median([r[name][p] for r in rounds]) for p in ("p50", "p95", "p99")} for name, _ in FIGURES
        }
        entry["req_per_s"] = _median([r["req_per_s"] for r in rounds])
        entry["completed"] = sum(r["completed"] for r in rounds)
        entry["errors"] = sum(r["errors"] for r in rounds)
        entry["output_tokens"] = sum(int(r["output_tokens"] or 0) for r in rounds)
        arms[arm] = entry
    ratios: dict[str, Any] = {}
    if set(ARMS) <= arms.keys():
        g, d = arms["gateway"], arms["direct"]
        for name, _ in FIGURES:
            ratios[name] = {p: _ratio(g[name][p], d[name][p]) for p in ("p50", "p95", "p99")}
        ratios["req_per_s"] = _ratio(g["req_per_s"], d["req_per_s"])
    return {"arms": arms, "gateway_vs_direct": ratios}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def render(summary: dict[str, Any]) -> str:
    lines = [f"{'figure':14s} {'direct':>10s} {'gateway':>10s} {'ratio':>7s}"]
    arms, ratios = summary["arms"], summary["gateway_vs_direct"]
    for name, _ in FIGURES:
        for p in ("p50", "p95", "p99"):
            d, g = arms["direct"][name][p], arms["gateway"][name][p]
            r = ratios.get(name, {}).get(p)
            lines.append(f"{name + ' ' + p:14s} {_fmt(d):>10s} {_fmt(g):>10s} {_fmt(r, 3) + 'x' if r else '-':>7s}")
    r = ratios.get("req_per_s")
    lines.append(
        f"{'req/s':14s} {_fmt(arms['direct']['req_per_s']):>10s} {_fmt(arms['gateway']['req_per_s']):>10s} "
        f"{_fmt(r, 3) + 'x' if r else '-':>7s}"
    )
    lines.append(f"{'completed':14s} {arms['direct']['completed']:>10d} {arms['gateway']['completed']:>10d}")
    lines.append(f"{'errors':14s} {arms['direct']['errors']:>10d} {arms['gateway']['errors']:>10d}")
    return "\n".join(lines)


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _masked(text: str, secrets_: list[str]) -> str:
    for s in secrets_:
        text = text.replace(s, "***")
    return text


def _bench_serving_round(
    args: argparse.Namespace, name: str, base: str, token: str, tokenizer: str, work: Path, stem: str, secrets_: list[str]
) -> dict[str, Any]:
    python, tool_env = _runtime_python()
    raw = work / f"{stem}.raw.jsonl"
    env = {**tool_env, "OPENAI_API_KEY": token, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("API_KEY", None)
    proc = subprocess.run(_tool_argv(python, base, MODEL, tokenizer, raw, args), cwd=work, env=env, capture_output=True,
                          text=True, timeout=args.timeout)  # fmt: skip
    result = _keep(raw, proc.stdout + proc.stderr, args.out, stem, secrets_)
    if proc.returncode != 0 and not result:
        tail = _masked((proc.stdout + proc.stderr)[-2000:], secrets_)
        raise SystemExit(f"bench_serving failed on {name} (exit {proc.returncode}):\n{tail}")
    return _figures(result, args.num_prompts)


def _aiperf_round(
    args: argparse.Namespace, name: str, base: str, token: str, tokenizer: str, work: Path, stem: str, secrets_: list[str]
) -> dict[str, Any]:
    artifacts = work / stem
    argv, env = aiperf_command(args, base, tokenizer, artifacts)
    # AIPerf 0.13 takes the key only as --api-key on its command line (no file, no variable): it is the
    # scratch run token of this stack (dies with it), and it is masked in everything we keep.
    proc = subprocess.run([*argv, "--api-key", token], cwd=work, env=env, capture_output=True, text=True,
                          timeout=args.timeout)  # fmt: skip
    log = _masked(proc.stdout + proc.stderr, secrets_)
    export = keep_aiperf_outputs(artifacts, args.out / stem, log, secrets_)
    if proc.returncode != 0 and export is None:
        raise SystemExit(f"aiperf failed on {name} (exit {proc.returncode}):\n{log[-2000:]}")
    return aiperf_figures(export or {}, args.num_prompts)


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    one_round = _aiperf_round if args.tool == "aiperf" else _bench_serving_round
    opts = StackOptions(engine=args.engine, model_dir=Path(args.model_dir) if args.model_dir else None,
                        max_tokens=args.output_len, benchmark_lock=True, fake_itl_ms=args.fake_itl_ms)  # fmt: skip
    per_round: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    with tempfile.TemporaryDirectory(prefix="hitch-external-") as tmp, started_stack(opts, Path(tmp)) as stack:
        work = Path(tmp)
        tokens = {name: arm.headers["Authorization"].removeprefix("Bearer ") for name, arm in stack.arms.items()}
        secrets_ = list(tokens.values())
        for r in range(args.rounds):
            order = ARMS if r % 2 == 0 else ARMS[::-1]
            for name in order:
                # both tools want the base URL without /v1 (they append /v1/chat/completions and probe /v1/models)
                base = stack.arms[name].url.removesuffix("/chat/completions").removesuffix("/v1")
                stem = f"{name}_round{r + 1}"
                figures = one_round(args, name, base, tokens[name], str(stack.model_dir), work, stem, secrets_)
                per_round[name].append(figures)
                print(f"round {r + 1}/{args.rounds} {name} done", file=sys.stderr)
    summary = summarize(per_round)
    report = {
        "schema_version": "1",
        "kind": "external-benchmark",
        "tool": args.tool,
        "tool_args": {
            "backend": "sglang-oai-chat" if args.tool == "bench_serving" else "chat (streaming)",
            "dataset": "random-ids" if args.tool == "bench_serving" else "synthetic",
            "input_len": args.input_len,
            "output_len": args.output_len,
            "num_prompts": args.num_prompts,
            "max_concurrency": args.max_concurrency,
            "ignore_eos": not args.disable_ignore_eos,
            "seed": args.seed,
        },
        "engine": args.engine,
        "rounds": args.rounds,
        "figures": "as the tool reports them per round (ms), median over rounds; errors and completions summed",
        **summary,
    }
    (out / "summary.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m certify.external", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--tool", choices=TOOLS, default="bench_serving")
    p.add_argument("--engine", choices=["fake", "sglang"], default="fake")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num-prompts", type=int, default=16)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--max-concurrency", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fake-itl-ms", type=float, default=0.0, help="fake engine: pause between tokens (one chunk each)")
    p.add_argument("--disable-ignore-eos", action="store_true", help="passed to the tool (it then sends ignore_eos=false)")
    p.add_argument("--model-dir", default=None, help="checkpoint dir (default: the tiny fixture)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per tool invocation")
    p.add_argument("--out", type=Path, help="folder for the native outputs and summary.json")
    p.add_argument("--install-aiperf", action="store_true", help="install AIPerf (pinned) into its private venv and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.install_aiperf:
        print(f"AIPerf installed: {install_aiperf()}")
        return 0
    if args.out is None:
        raise SystemExit("--out is required")
    if args.rounds < 1 or args.num_prompts < 1:
        raise SystemExit("--rounds and --num-prompts must be at least 1")
    report = run(args)
    print(render(report))
    print(f"\nwrote {args.out / 'summary.json'}")
    return 0 if all(report["arms"][a]["errors"] == 0 for a in ARMS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
