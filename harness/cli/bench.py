"""``hitch bench ...``: benchmark scripts that print figures (never timed tests).

The benchmarks drive the fake engine and real SGLang, so they live with the certification code; the CLI checks
what it was given with the application layer (:mod:`harness.app.load_schedule`) and runs them as a separate
process (``python -m certify.perf|external|load``), importing none of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from harness.cli import options as opt
from harness.cli.options import check_choice
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError
from harness.settings import env_name

app = typer.Typer(no_args_is_help=True, help="benchmarks (figures, not pass/fail)")


def _script(argv: list[str], as_json: bool, figures: Path, kind: str) -> int:
    """Run a benchmark script. With ``--json`` its progress and tables go to stderr and stdout holds one JSON
    document: the figures file it wrote. ``--root`` reaches it as HITCH_ROOT (set by ``main`` for the process)."""
    if not as_json:
        return subprocess.call(argv)
    code = subprocess.call(argv, stdout=sys.stderr.fileno())
    if code == 0:
        emit(True, {"kind": kind, "figures_file": str(figures), "figures": json.loads(figures.read_text(encoding="utf-8"))})
    return code


@app.command(
    "overhead",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="gateway vs direct vs bare reference proxy (certify.perf); extra options go to python -m certify.perf: "
    "--rounds, --requests, --max-tokens, --fake-itl-ms, --profile-gateway ... (see --help there)",
)
@cli_command
def overhead(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option("--out", help="write the figures as JSON here")] = None,
    engine: opt.BenchEngine = "sglang",
    common: Common = COMMON,
) -> None:
    _ = common.hroot  # a --root that is not a directory is refused before the benchmark starts
    argv = [sys.executable, "-m", "certify.perf", "--engine", engine, *ctx.args]
    with tempfile.TemporaryDirectory(prefix="hitch-bench-") as scratch:
        figures = out if out is not None else Path(scratch) / "overhead.json"
        if out is not None or common.as_json:
            argv += ["--out", str(figures)]
        raise typer.Exit(_script(argv, common.as_json, figures, "bench-overhead"))


@app.command(
    "external",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="the field's own tool against direct and our gateway (a benchmark lock) in interleaved rounds; native "
    "outputs + summary.json into --out. --tool bench_serving: stock sglang.bench_serving from the runtime's venv "
    "(URL without /v1, key via OPENAI_API_KEY, random-ids dataset since random downloads ShareGPT, its "
    "/server_info echo of engine keys stripped). --tool aiperf: AIPerf 0.13.0 from its private venv (make aiperf; "
    "URL without /v1; the key only as its --api-key argument, the stack's scratch run token, masked in what is "
    "kept; HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE removed so the local tokenizer path loads; its timing process "
    "spins a core, so keep to the fake engine or few requests beside a CPU engine). Extra options go to "
    "certify.external (see --help there)",
)
@cli_command
def external(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="folder for the native outputs and summary.json")],
    tool: Annotated[str, typer.Option("--tool", help="bench_serving | aiperf")] = "bench_serving",
    engine: opt.BenchEngine = "sglang",
    common: Common = COMMON,
) -> None:
    check_choice("--tool", tool, ("bench_serving", "aiperf"))
    _ = common.hroot  # a --root that is not a directory is refused before the benchmark starts
    argv = [sys.executable, "-m", "certify.external", "--tool", tool, "--engine", engine, "--out", str(out), *ctx.args]
    raise typer.Exit(_script(argv, common.as_json, out / "summary.json", "bench-external"))


@app.command(
    "load",
    help="locust load, gateway vs direct with the same schedule: CSVs + summary.json into --out (see certify/load)",
)
@cli_command
def load(
    target: Annotated[str, typer.Option("--target", help="gateway | direct | both (direct, then gateway)")] = "both",
    users: Annotated[int, typer.Option("--users", help="concurrent locust users")] = 16,
    spawn_rate: Annotated[float, typer.Option("--spawn-rate", help="users started per second")] = 8.0,
    run_time: Annotated[str, typer.Option("--run-time", help="per target: 30, 30s, 2m, 1m30s")] = "30s",
    engine: opt.BenchEngine = "sglang",
    stream: Annotated[bool, typer.Option("--stream/--no-stream", help="SSE (TTFT and ITL recorded) or not")] = True,
    api: Annotated[str, typer.Option("--api", help="chat | responses")] = "chat",
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="output budget per request")] = 16,
    seed: Annotated[int, typer.Option("--seed", help="seed of each user's prompt sequence")] = 0,
    out: Annotated[Path | None, typer.Option("--out", help="folder for the CSVs and summary.json")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="running gateway run (ends in /v1)")] = None,
    token_file: Annotated[Path | None, typer.Option("--token-file", help="its run token file")] = None,
    model: Annotated[str | None, typer.Option("--model", help="its wire model name")] = None,
    direct_url: Annotated[str | None, typer.Option("--direct-url", help="the engine's URL (ends in /v1)")] = None,
    direct_key_file: Annotated[Path | None, typer.Option("--direct-key-file", help="the engine key file")] = None,
    direct_model: Annotated[str | None, typer.Option("--direct-model", help="engine model name (default --model)")] = None,
    common: Common = COMMON,
) -> None:
    # Bad values are usage errors here, before any process starts; the benchmark re-checks them.
    from harness.app.load_schedule import APIS, LoadSchedule, parse_run_time, targets_for

    targets_for(target)
    if api not in APIS:
        raise HitchError("usage_error", f"api must be one of {', '.join(APIS)}", {"api": api})
    LoadSchedule(
        users=users,
        spawn_rate=spawn_rate,
        run_time_s=parse_run_time(run_time),
        seed=seed,
        max_tokens=max_tokens,
        api="chat" if api == "chat" else "responses",
        stream=stream,
    )
    argv = [sys.executable, "-m", "certify.load", "--target", target, "--users", str(users), "--spawn-rate", str(spawn_rate),
            "--run-time", run_time, "--engine", engine, "--stream" if stream else "--no-stream", "--api", api,
            "--max-tokens", str(max_tokens), "--seed", str(seed)]  # fmt: skip
    optional = {"--out": out, "--base-url": base_url, "--token-file": token_file, "--model": model,
                "--direct-url": direct_url, "--direct-key-file": direct_key_file, "--direct-model": direct_model}  # fmt: skip
    for flag, value in optional.items():
        if value is not None:
            argv += [flag, str(value)]
    if common.as_json:
        argv.append("--json")
    env = {**os.environ, env_name("root"): str(common.hroot.path)} if common.root is not None else None
    raise typer.Exit(subprocess.call(argv, env=env))
