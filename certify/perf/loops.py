"""The arms and the loops of the overhead measurement.

An :class:`Arm` is one way to reach the same engine: **direct** (the engine's URL and key; the body is what
the gateway would forward, the caller's body after the lock's policy), **gateway** (a run's base URL and
token; the caller's body) and, in ``hitch bench overhead``, **reference** (the bare pass-through of
:mod:`certify.perf.reference_proxy`). Chat completions, stream and non-stream (the two *kinds*).

- Concurrency 1: after a warm-up, each round sends ``n_c1`` requests per arm, *alternating* arm by arm
  (the first arm rotates per round), so drift in the machine's load hits every arm alike.
- Concurrency C: ``n_conc`` requests per arm per round taken by C workers; throughput = n / elapsed. The
  engine refuses beyond its own queue; the gateway queues up to its own bound (``GatewayConfig.max_waiting``)
  and refuses more with 429. Each arm's workers share a client-side semaphore (``Arm.admitted``; 0:
  unbounded): the gateway arm's is the lock's ``max_running_requests + max_queued_requests``, what the engine
  behind it holds, so the gateway's own queue does not lengthen the measured latencies.
- The engine's queue-full refusals (its 503, or a 200 stream whose only event is its in-band "queue is
  full" error) and the gateway's queue-full 429 (another client of a shared engine filled a queue; nothing
  ran) are re-sent and counted (``retries``); any other non-200, and a 200 carrying another in-band error,
  fails the measurement: a refusal is never counted as a served request.

Each arm with a ``pid`` (a proxy process of ours) also gets the CPU time that process spent per request.
Times are ``time.perf_counter`` seconds; TTFT and ITL as :mod:`certify.perf.reading` defines them.

An arm with an ``evidence`` reader (our gateway) also gets, per c=1 request, the engine's share of it from
the gateway's evidence row (matched by the request id the gateway answers with): ``engine_ms`` (the request
leaving for the engine -> the answer read to its end) and ``engine_ttft_ms``. The client's time minus that
share is the request's **residence** in the gateway as the client saw it — the engine's own variance taken
out (see :mod:`certify.perf.summary`).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import psutil

from certify.perf.reading import StreamClock
from gateway.replies import REQUEST_ID_HEADER

__all__ = ["KINDS", "Arm", "Plan", "Round", "Sample", "as_json", "attach_engine_times", "measure", "one", "pooled"]

KINDS = ("unary", "stream")
ENGINE_QUEUE_FULL = b"The request queue is full."
GATEWAY_QUEUE_FULL = b'"code":"inference_queue_full"'


@dataclass(frozen=True)
class Plan:
    rounds: int
    warmup: int
    n_c1: int  # requests per arm per kind per round at concurrency 1
    concurrency: int
    n_conc: int  # requests per arm per kind per round at concurrency C
    max_tokens: int
    kinds: tuple[str, ...] = KINDS  # the kinds measured (a benchmark may take one; certify takes both)

    @property
    def pooled(self) -> int:
        """Samples per arm per kind behind each pooled percentile."""
        return self.rounds * self.n_c1


@dataclass(frozen=True)
class Arm:
    name: str
    url: str  # the full chat completions URL
    headers: dict[str, str] = field(repr=False)
    body: dict[str, bytes]  # kind -> request bytes
    admitted: int = 0  # requests the target holds at once (running + queued); more wait client-side
    pid: int | None = None  # our proxy process, whose CPU time is measured
    evidence: Callable[[], list[dict[str, Any]]] | None = field(default=None, repr=False)  # the gateway's rows now


@dataclass
class Sample:
    e2e: float
    ttft: float | None = None
    itl: float | None = None
    tokens: int | None = None  # completion tokens (unary: the usage; stream: text events)
    request_id: str | None = None  # the gateway's id for it (its response header)
    engine: float | None = None  # the engine's share of e2e, from the gateway's evidence
    engine_ttft: float | None = None  # the engine's share of ttft, from the gateway's evidence

    @property
    def residence(self) -> float | None:
        """The client's E2E minus the engine's share: the time the request spent in the gateway."""
        return None if self.engine is None else self.e2e - self.engine

    @property
    def ttft_residence(self) -> float | None:
        return None if self.engine_ttft is None or self.ttft is None else self.ttft - self.engine_ttft


@dataclass
class Round:
    """One round: per kind, per arm, the c=1 samples, the c=C throughput and CPU ms per request."""

    c1: dict[str, dict[str, list[Sample]]] = field(default_factory=dict)
    rps: dict[str, dict[str, float]] = field(default_factory=dict)
    cpu_ms_c1: dict[str, dict[str, float]] = field(default_factory=dict)
    cpu_ms_conc: dict[str, dict[str, float]] = field(default_factory=dict)
    # the same c=1 CPU as the kernel's utime + stime ticks (10 ms steps: meaningful as a mean over rounds); the
    # scheduler's count above also holds the softirq work done in the process's context (loopback delivery)
    cpu_ticks_ms_c1: dict[str, dict[str, float]] = field(default_factory=dict)


def _usage_tokens(raw: bytes) -> int | None:
    usage = json.loads(raw).get("usage") or {}
    tokens = usage.get("completion_tokens")
    return int(tokens) if isinstance(tokens, int) else None


async def one(session: aiohttp.ClientSession, arm: Arm, kind: str, retries: dict[str, int]) -> Sample:
    """One request, timed. Queue-full refusals are re-sent and counted; anything else that is not a served
    answer raises ``AssertionError`` (the suites' failure; the benchmark's crash)."""
    for _ in range(100):
        t0 = time.perf_counter()
        async with session.post(arm.url, data=arm.body[kind], headers=arm.headers) as resp:
            if resp.status in (503, 429):
                body = await resp.read()
                if ENGINE_QUEUE_FULL in body or GATEWAY_QUEUE_FULL in body:
                    retries[arm.name] = retries.get(arm.name, 0) + 1
                    await asyncio.sleep(0.005)
                    continue
                raise AssertionError(f"{arm.name} {kind}: HTTP {resp.status}: {body[:300]!r}")
            if resp.status != 200:
                raise AssertionError(f"{arm.name} {kind}: HTTP {resp.status}: {(await resp.read())[:300]!r}")
            rid = resp.headers.get(REQUEST_ID_HEADER)
            if kind == "unary":
                return Sample(time.perf_counter() - t0, tokens=_usage_tokens(await resp.read()), request_id=rid)
            clock = StreamClock("chat", t0)
            async for chunk in resp.content.iter_any():
                clock.feed(chunk, time.perf_counter())
            e2e = time.perf_counter() - t0
            errors = [data for _name, data in clock.events if data.startswith(b'{"error"')]
            if errors and ENGINE_QUEUE_FULL in errors[0]:  # SGLang's in-band refusal: nothing ran, like its 503
                retries[arm.name] = retries.get(arm.name, 0) + 1
                await asyncio.sleep(0.005)
                continue
            if errors:  # a refusal is never counted as a served request
                raise AssertionError(f"{arm.name} {kind}: in-band error after 200: {errors[0][:300]!r}")
            if not clock.events or clock.events[-1][1] != b"[DONE]":
                raise AssertionError(f"{arm.name} {kind}: the stream ended without [DONE]")
            return Sample(e2e, clock.ttft, clock.itl, len(clock.text_times), rid)
    raise AssertionError(f"{arm.name} {kind}: refused 100 times in a row (queue full)")


def _cpu_ticks_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _cpu_s(pid: int | None) -> float:
    """The process's CPU time in seconds: the scheduler's nanosecond count summed over its threads
    (``/proc/PID/task/*/schedstat``); ``cpu_times`` (clock ticks: 10 ms steps) where that is not readable."""
    if pid is None:
        return 0.0
    try:
        total = 0
        for task in os.scandir(f"/proc/{pid}/task"):
            with open(f"{task.path}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return _cpu_ticks_s(pid)


async def _concurrent(
    session: aiohttp.ClientSession, arm: Arm, kind: str, plan: Plan, retries: dict[str, int]
) -> tuple[float, float]:
    left = plan.n_conc
    gate = asyncio.Semaphore(arm.admitted) if arm.admitted else None

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            if gate is None:
                await one(session, arm, kind, retries)
            else:
                async with gate:
                    await one(session, arm, kind, retries)

    cpu0 = _cpu_s(arm.pid)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(plan.concurrency)))
    elapsed = time.perf_counter() - t0
    return plan.n_conc / elapsed, (_cpu_s(arm.pid) - cpu0) * 1000 / plan.n_conc


async def measure(arms: dict[str, Arm], plan: Plan, progress: bool = False) -> tuple[list[Round], dict[str, int]]:
    """Warm-up, then ``plan.rounds`` rounds of both loops for both kinds; returns the rounds and the retries."""
    retries: dict[str, int] = {}
    rounds: list[Round] = []
    names = list(arms)
    sessions = {name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) for name in names}
    try:
        for kind in plan.kinds:  # warm-up: connections, tokenizer caches, the engine's first-request paths
            for _ in range(plan.warmup):
                for name in names:
                    await one(sessions[name], arms[name], kind, retries)
        for r in range(plan.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            rd = Round()
            for kind in plan.kinds:
                samples: dict[str, list[Sample]] = {name: [] for name in names}
                cpu0 = {name: _cpu_s(arms[name].pid) for name in names}
                ticks0 = {name: _cpu_ticks_s(arms[name].pid) for name in names}
                for _ in range(plan.n_c1):
                    for name in order:
                        samples[name].append(await one(sessions[name], arms[name], kind, retries))
                rd.cpu_ms_c1[kind] = {name: (_cpu_s(arms[name].pid) - cpu0[name]) * 1000 / plan.n_c1 for name in names}
                rd.cpu_ticks_ms_c1[kind] = {
                    name: (_cpu_ticks_s(arms[name].pid) - ticks0[name]) * 1000 / plan.n_c1 for name in names
                }
                rd.c1[kind] = samples
                rd.rps[kind], rd.cpu_ms_conc[kind] = {}, {}
                for name in order if plan.n_conc > 0 else ():  # n_conc 0: no c=C loop (its figures are None)
                    rps, cpu = await _concurrent(sessions[name], arms[name], kind, plan, retries)
                    rd.rps[kind][name], rd.cpu_ms_conc[kind][name] = rps, cpu
            rounds.append(rd)
            if progress:
                print(f"round {r + 1}/{plan.rounds} done", flush=True)
    finally:
        for s in sessions.values():
            await s.close()
    await asyncio.to_thread(attach_engine_times, rounds, arms)
    return rounds, retries


def attach_engine_times(rounds: list[Round], arms: dict[str, Arm], timeout_s: float = 60.0) -> None:
    """Fill each c=1 sample of an arm with an evidence reader with the engine's share of it (see the module
    doc). The gateway writes its rows in the background: wait until every sample's row is on disk; a sample
    without a request id or a row with no engine time fails the measurement (its residence is unknown)."""
    for name, arm in arms.items():
        if arm.evidence is None:
            continue
        samples = [s for rd in rounds for per in rd.c1.values() for s in per[name]]
        missing = [s for s in samples if s.request_id is None]
        assert not missing, f"{name}: {len(missing)} answers carried no {REQUEST_ID_HEADER} header"
        rows: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout_s
        while True:
            rows.update({str(r["request_id"]): r for r in arm.evidence()})
            if all(s.request_id in rows for s in samples) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not all(s.request_id in rows for s in samples):
            absent = sum(s.request_id not in rows for s in samples)
            raise AssertionError(f"{name}: no evidence row for {absent} of {len(samples)} requests after {timeout_s:.0f} s")
        for s in samples:
            row = rows[str(s.request_id)]
            if row.get("engine_ms") is None:
                raise AssertionError(f"{name}: request {s.request_id} has no engine time in its evidence row: {row}")
            s.engine = float(row["engine_ms"]) / 1000
            s.engine_ttft = None if row.get("engine_ttft_ms") is None else float(row["engine_ttft_ms"]) / 1000


def pooled(rounds: list[Round], kind: str, arm: str, field_: str) -> list[float]:
    """One arm's samples of one field over every round (Nones left out)."""
    return [v for rd in rounds for s in rd.c1[kind][arm] if (v := getattr(s, field_)) is not None]


def as_json(rounds: list[Round]) -> list[dict[str, Any]]:
    """The raw rounds for a JSON file (seconds)."""
    return [
        {
            "c1": {
                k: {a: [[s.e2e, s.ttft, s.itl, s.tokens, s.engine, s.engine_ttft] for s in v] for a, v in per.items()}
                for k, per in rd.c1.items()
            },
            "rps": rd.rps,
            "cpu_ms_c1": rd.cpu_ms_c1,
            "cpu_ms_conc": rd.cpu_ms_conc,
            "cpu_ticks_ms_c1": rd.cpu_ticks_ms_c1,
        }
        for rd in rounds
    ]
