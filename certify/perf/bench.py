"""``python -m certify.perf`` (run by ``hitch bench overhead``): the overhead measurement on a stack started here.

Arms: direct, gateway, (unless ``--no-reference``) the bare reference proxy and (``--nginx``: by default
when installed) nginx, the field's native relay, on the fake engine or the generic-CPU SGLang runtime
(:mod:`certify.perf.stack`); loops and figures are the perf suite's (:mod:`certify.perf.loops`,
:mod:`certify.perf.summary`). The defaults give ``--rounds x --requests`` =
500 pooled samples per arm per kind, so p99 has 5 samples beyond it (a p99 from < 100 is marked
unreliable). ``--max-tokens 128 --fake-itl-ms 2`` measures the per-token cost (each token its own chunk);
``--open-streams N`` adds the gateway's memory per open stream (fake engine only: streams held by its stall
fault); ``--profile-gateway F`` writes a cProfile (thread CPU time) of the gateway process.

Figures go to stdout and, with ``--out``, to a JSON file (summary plus the raw samples). Targets on the fake
engine: added p50 <= 0.8 ms and p99 <= 2.5 ms at c=1, TTFT added p50 <= 0.8 ms, CPU <= 1.5x reference,
c=32 throughput >= 0.8x reference. A benchmark prints figures; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import psutil
import uvloop

from certify.perf.loops import Arm, Plan, as_json, measure
from certify.perf.nginx_relay import nginx_binary
from certify.perf.stack import Stack, StackOptions, started_stack
from certify.perf.summary import render, summarize

__all__ = ["Termination", "main"]

_T = TypeVar("_T")


async def _open_streams(arm: Arm, stack: Stack, n: int) -> float | None:
    """Gateway RSS growth per open stream, streams held open by the fake's stall fault."""
    ctl = stack.fake_control
    if ctl is None or arm.pid is None or n <= 0:
        return None
    proc = psutil.Process(arm.pid)
    ctl.faults("stall_mid_stream:t=20,after=2")
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            rss0 = proc.memory_info().rss
            responses = []
            for _ in range(n):
                resp = await session.post(arm.url, data=arm.body["stream"], headers=arm.headers)
                await resp.content.readany()
                responses.append(resp)
            rss1 = proc.memory_info().rss
            for resp in responses:
                resp.close()
    finally:
        ctl.reset()
    return float(rss1 - rss0) / n


def _cores(stack: Stack) -> dict[str, list[int]]:
    """The cores each side ran on, read from the processes (the engine's whole tree)."""
    engine = psutil.Process(stack.engine_pid)
    engine_cores = {core for proc in (engine, *engine.children(recursive=True)) for core in proc.cpu_affinity()}
    gateway = stack.arms["gateway"].pid
    gateway_cores = psutil.Process(gateway).cpu_affinity() if gateway is not None else []
    return {"engine": sorted(engine_cores), "gateway": sorted(gateway_cores), "load": sorted(os.sched_getaffinity(0))}


def _with_nginx(choice: str) -> bool:
    found = nginx_binary() is not None
    if choice == "on" and not found:
        raise SystemExit("--nginx on: nginx is not installed (make nginx: Debian's nginx-light)")
    if choice == "auto" and not found:
        print("note: nginx is not installed (make nginx): no native relay arm", file=sys.stderr)
    return choice != "off" and found


def _core_list(text: str) -> tuple[int, ...]:
    try:
        cores = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        cores = ()
    if not cores:
        raise argparse.ArgumentTypeError(f"not a list of core numbers: {text!r}")
    return cores


async def _run(args: argparse.Namespace, stack: Stack, plan: Plan) -> dict[str, Any]:
    rounds, retries = await measure(stack.arms, plan, progress=True)
    report = summarize(rounds, plan, retries, stack.lock.execution.max_running_requests)
    gateway_pid = stack.arms["gateway"].pid
    report["gateway_nice"] = None if gateway_pid is None else psutil.Process(gateway_pid).nice()  # as it ran
    report["cores"] = _cores(stack) if args.engine_cores else None
    report["results"]["gateway_rss_bytes_per_open_stream"] = await _open_streams(stack.arms["gateway"], stack, args.open_streams)
    report["raw_rounds_s"] = as_json(rounds)
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m certify.perf", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--engine", choices=["fake", "sglang"], default="fake")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=100, help="requests per arm per kind per round at c=1")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--concurrent-requests", type=int, default=256, help="requests per arm per kind per round at c=C (0: none)")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--fake-itl-ms", type=float, default=0.0, help="fake engine: pause between tokens (one chunk each)")
    p.add_argument("--kinds", choices=["both", "stream", "unary"], default="both", help="the kinds of request measured")
    p.add_argument("--no-reference", action="store_true", help="leave out the bare reference proxy arm")
    p.add_argument(
        "--nginx",
        choices=["auto", "on", "off"],
        default="auto",
        help="nginx as a third relay (auto: when installed; make nginx); its CPU per event beside the gateway's",
    )
    p.add_argument("--open-streams", type=int, default=100)
    p.add_argument("--capture", choices=["off", "metadata", "full"], default="off")
    p.add_argument("--model-dir", type=Path, default=None, help="checkpoint dir (default: the tiny fixture)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--profile-gateway", type=Path, default=None, help="write a cProfile of the gateway process here")
    p.add_argument(
        "--gateway-nice",
        type=int,
        choices=range(20),
        default=0,
        metavar="0..19",
        help="run the gateway process at this niceness: on a machine whose engine uses every core, what share of "
        "the per-token cost is the gateway's CPU taken from the engine (the product's gateway runs at 0)",
    )
    p.add_argument(
        "--engine-cores",
        type=_core_list,
        default=None,
        metavar="N[,N...]",
        help="start the engine on these cores only, and the gateway, reference proxy and load generator on the "
        "other usable cores (read back from the processes and printed): the overhead where the engine leaves "
        "cores to the serving side; by default every process shares every core",
    )
    return p


class Termination:
    """SIGTERM unwinds the benchmark like Ctrl-C, so the engine (in its own process group) and the gateway stop.

    Outside the event loop the first SIGTERM raises ``SystemExit(143)``. Inside it, raising from the handler
    could land in a transport callback, where the loop turns it into a broken connection and the run ends as
    a payload error (exit 1): so the measuring task is cancelled instead, as ``asyncio.Runner`` does for
    SIGINT, and ``SystemExit(143)`` is raised once the loop has unwound. Later SIGTERMs do not interrupt the
    unwinding (SIGKILL still does).
    """

    def __init__(self) -> None:
        self.received = False
        self._in_loop = False
        self._task: asyncio.Task[Any] | None = None

    def handle(self, signum: int, _frame: object) -> None:
        if self.received:
            return
        self.received = True
        if not self._in_loop:
            raise SystemExit(128 + signum)
        if self._task is not None and not self._task.done():
            self._task.cancel()
            self._task.get_loop().call_soon_threadsafe(lambda: None)  # wake the loop

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """``uvloop.run(coro)``; a SIGTERM during it cancels ``coro`` and ends in ``SystemExit(143)``."""

        async def guarded() -> _T:
            self._task = asyncio.current_task()
            if self.received:  # before the task existed
                raise asyncio.CancelledError
            return await coro

        self._in_loop = True
        try:
            result = uvloop.run(guarded())
        except BaseException:
            if not self.received:
                raise
        finally:
            self._in_loop, self._task = False, None
            coro.close()  # never awaited when cancelled first; a no-op otherwise
        if self.received:
            raise SystemExit(128 + signal.SIGTERM)
        return result


def main(argv: list[str] | None = None) -> int:
    termination = Termination()
    previous = signal.signal(signal.SIGTERM, termination.handle)
    try:
        return _main(argv, termination)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None, termination: Termination) -> int:
    args = parser().parse_args(argv)
    if args.rounds < 1 or args.requests < 1 or args.concurrent_requests < 0:
        raise SystemExit("--rounds and --requests must be at least 1, --concurrent-requests at least 0")
    kinds = ("unary", "stream") if args.kinds == "both" else (args.kinds,)
    plan = Plan(args.rounds, args.warmup, args.requests, args.concurrency, args.concurrent_requests, args.max_tokens, kinds)
    if plan.pooled < 100:
        print(f"note: {plan.pooled} samples per arm: p99 is shown as unreliable (needs 100)", file=sys.stderr)
    opts = StackOptions(
        engine=args.engine,
        model_dir=args.model_dir,
        permits=max(64, args.open_streams + 8, args.concurrency),
        max_tokens=args.max_tokens,
        fake_itl_ms=args.fake_itl_ms,
        capture=args.capture,
        reference=not args.no_reference,
        nginx=_with_nginx(args.nginx),
        profile_gateway=args.profile_gateway,
        gateway_nice=args.gateway_nice,
        engine_cores=args.engine_cores,
    )
    with tempfile.TemporaryDirectory(prefix="hitch-bench-") as tmp, started_stack(opts, Path(tmp)) as stack:
        report = termination.run(_run(args, stack, plan))
    report |= {
        "engine": args.engine,
        "fake_itl_ms": args.fake_itl_ms if args.engine == "fake" else None,
        "capture": args.capture,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "targets": {"added_p50_ms": 0.8, "added_p99_ms": 2.5, "ttft_added_p50_ms": 0.8, "cpu_vs_reference": 1.5,
                    "throughput_vs_reference_c32": 0.8},
    }  # fmt: skip
    print(render(report))
    rss = report["results"]["gateway_rss_bytes_per_open_stream"]
    if rss is not None:
        print(f"gateway memory per open stream: {rss / 1024:.1f} KiB")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 0
