"""The load benchmark's sequence: targets, one locust process per target, ``summary.json``.

``python -m certify.load`` (run by ``hitch bench load``). Targets come from one of two places:

- **started here** (default): the stack of :mod:`certify.perf.stack` — the fake engine
  (``--engine fake``) or the generic-CPU SGLang runtime (``--engine sglang``), a real draft lock, and our
  gateway as a separate process with one registered run. *direct* is the engine's ``/v1`` with its key and
  the body the gateway would forward (the lock's policy applied); *gateway* is the run's base URL with
  the run token and the caller's body.
- **running endpoints** (``--base-url URL --token-file F --model M`` for the gateway, e.g. what
  ``hitch local serve`` prints; ``--direct-url URL --direct-key-file F [--direct-model M]`` for the engine):
  nothing is started; the direct arm sends the caller's body unchanged.

The targets run one after the other (direct, then gateway) against the same engine with the same
schedule; each run is a fresh :mod:`certify.load.runner` process. Files are written into a staging
folder next to ``--out`` and moved in at the end: ``<target>_stats.csv``, ``<target>_stats_history.csv``,
``<target>_failures.csv``, ``<target>_exceptions.csv``, ``summary.json``. Tokens travel in 0600 files,
never in argv.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from certify.load.schedule import PROMPTS, TargetPlan, caller_body, route_for, schedule_facts
from certify.load.summary import build_summary, render_table
from certify.perf.stack import MODEL, StackOptions, started_stack
from gateway.policy import apply_policy
from harness.app.load_schedule import APIS, TARGETS, LoadSchedule, parse_run_time, targets_for
from harness.errors import HitchError
from harness.paths import write_secret

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[2]
RUNNER_GRACE_S = 120.0


def _bodies(schedule: LoadSchedule, model: str, policy: Callable[[bytes], bytes] | None = None) -> list[str]:
    out = []
    for prompt in PROMPTS:
        raw = json.dumps(caller_body(schedule, model, prompt)).encode()
        out.append((policy(raw) if policy else raw).decode())
    return out


@contextmanager
def _started_targets(args: argparse.Namespace, schedule: LoadSchedule, work: Path) -> Iterator[dict[str, TargetPlan]]:
    """The overhead measurement's stack (:mod:`certify.perf.stack`); yields one plan per arm we use."""

    opts = StackOptions(engine=args.engine, model_dir=Path(args.model_dir) if args.model_dir else None,
                        permits=max(64, schedule.users + 8), max_tokens=schedule.max_tokens)  # fmt: skip
    route = route_for(schedule.api)
    with started_stack(opts, work) as stack:

        def policy(raw: bytes) -> bytes:
            return apply_policy(route, raw, stack.lock, MODEL).body  # type: ignore[arg-type]

        plans = {}
        for name, bodies in (("direct", _bodies(schedule, MODEL, policy)), ("gateway", _bodies(schedule, MODEL))):
            arm = stack.arms[name]
            token = arm.headers["Authorization"].removeprefix("Bearer ")
            base = arm.url.removesuffix("/chat/completions")
            token_file = work / "private" / f"{name}.token"
            write_secret(token_file, token)
            plans[name] = TargetPlan(name, base, str(token_file), bodies, schedule)
        yield plans


def _external_targets(args: argparse.Namespace, schedule: LoadSchedule, order: list[str]) -> dict[str, TargetPlan]:
    plans: dict[str, TargetPlan] = {}
    if "gateway" in order:
        if not (args.base_url and args.token_file and args.model):
            raise HitchError("usage_error", "the gateway target needs --base-url, --token-file and --model", {})
        plans["gateway"] = TargetPlan("gateway", args.base_url, str(args.token_file), _bodies(schedule, args.model), schedule)
    if "direct" in order:
        model = args.direct_model or args.model
        if not (args.direct_url and args.direct_key_file and model):
            raise HitchError("usage_error", "the direct target needs --direct-url, --direct-key-file and a model", {})
        plans["direct"] = TargetPlan("direct", args.direct_url, str(args.direct_key_file), _bodies(schedule, model), schedule)
    return plans


def _run_target(plan: TargetPlan, staging: Path, work: Path) -> dict[str, Any]:
    plan_file, result_file = work / f"{plan.name}.plan.json", work / f"{plan.name}.result.json"
    plan.write(plan_file)
    argv = [sys.executable, "-m", "certify.load.runner", "--plan", str(plan_file), "--out-dir", str(staging)]
    timeout = plan.schedule.run_time_s + RUNNER_GRACE_S
    # The runner's stdout goes to our stderr: with --json our stdout carries only the summary.
    rc = subprocess.call([*argv, "--result", str(result_file)], cwd=REPO, stdout=sys.stderr, timeout=timeout)
    if rc != 0 or not result_file.exists():
        raise HitchError("internal_error", f"the locust run for {plan.name} exited {rc}", {"target": plan.name})
    result: dict[str, Any] = json.loads(result_file.read_text())
    return result


def _publish(staging: Path, out: Path) -> None:
    """Move the finished files in: a new --out is one rename; an existing folder gets each file replaced."""
    if not out.exists():
        staging.rename(out)
        return
    for f in staging.iterdir():
        os.replace(f, out / f.name)
    staging.rmdir()


def run(args: argparse.Namespace) -> dict[str, Any]:
    schedule = LoadSchedule(
        users=args.users,
        spawn_rate=args.spawn_rate,
        run_time_s=parse_run_time(args.run_time),
        seed=args.seed,
        max_tokens=args.max_tokens,
        api=args.api,
        stream=args.stream,
    )
    order = targets_for(args.target)
    out: Path = args.out or Path(f"hitch-load-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    if out.exists() and not out.is_dir():
        raise HitchError("usage_error", f"--out {out} exists and is not a folder", {"out": str(out)})
    out.parent.mkdir(parents=True, exist_ok=True)
    external = bool(args.base_url or args.direct_url)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="hitch-load-") as tmp:
            work = Path(tmp)
            results: dict[str, dict[str, Any]] = {}
            if external:
                plans = _external_targets(args, schedule, order)
                for name in order:
                    results[name] = _run_target(plans[name], staging, work)
            else:
                with _started_targets(args, schedule, work) as plans:
                    for name in order:
                        print(f"load: {name} ({schedule.users} users, {schedule.run_time_s:g} s)", file=sys.stderr)
                        results[name] = _run_target(plans[name], staging, work)
        summary = build_summary(
            engine="external" if external else args.engine,
            schedule=schedule_facts(schedule),
            order=order,
            targets={n: {k: v for k, v in r.items() if k != "name"} for n, r in results.items()},
            machine={"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        )
        (staging / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        _publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    summary["out"] = str(out)
    return summary


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m certify.load", description="locust load: gateway vs direct")
    p.add_argument("--target", choices=TARGETS, default="both")
    p.add_argument("--users", type=int, default=16)
    p.add_argument("--spawn-rate", type=float, default=8.0)
    p.add_argument("--run-time", default="30s")
    p.add_argument("--engine", choices=["fake", "sglang"], default="fake")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--api", choices=APIS, default="chat")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-dir", default=None, help="checkpoint for the started stack (default: the tiny fixture)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--json", action="store_true", dest="as_json")
    p.add_argument("--base-url", default=None, help="running gateway run's base URL (ends in /v1)")
    p.add_argument("--token-file", type=Path, default=None, help="the run token file (0600)")
    p.add_argument("--model", default=None, help="the wire model name the gateway expects")
    p.add_argument("--direct-url", default=None, help="the engine's base URL (ends in /v1)")
    p.add_argument("--direct-key-file", type=Path, default=None, help="the engine API key file (0600)")
    p.add_argument("--direct-model", default=None, help="the engine's served model name (default: --model)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        summary = run(args)
    except HitchError as exc:
        if args.as_json:
            print(json.dumps({"schema_version": "1", "error": exc.to_dict()}, indent=2, sort_keys=True))
        else:
            print(exc.human(), file=sys.stderr)
        return exc.exit_code
    if args.as_json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(render_table(summary))
        print(f"\nwrote {summary['out']}")
    failed = [n for n, t in summary["targets"].items() if t["requests"] - t["failures"] <= 0]
    if failed:
        print(f"no successful request for: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
