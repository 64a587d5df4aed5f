"""Readiness of a freshly launched engine (DESIGN §4, spec §9.1 step 5). TCP open is not ready.

The probe sequence, in order, all before one deadline:

1. the process is alive (checked between every attempt: a death is ``inference_process_exited``);
   when the caller passes a ``listener`` check (process launcher: who listens on the port), nothing at
   all is sent until the engine's own process tree listens there; another listener on the port is
   ``inference_port_conflict`` (it receives no request, not even ``/health``);
2. ``GET /health`` answers 200 (SGLang answers 503 until its own warmup is done);
3. ``GET /server_info`` with the engine key matches the lock (``verify.py``) — before any prompt is sent,
   so an unknown server on our port never receives one;
4. a short non-streaming ``/v1/responses`` generation and a streaming (SSE) one: budget
   ``PROBE_OUTPUT_TOKENS`` tokens, sent as ``budget + 2`` because SGLang's Responses path subtracts 2
   (reference sglang-http-api.md §6.2);
5. ``POST /flush_cache`` with the admin key, so the first real request finds an empty cache.

Failing the deadline is ``inference_start_timeout``; a wrong answer to a probe is
``inference_engine_unhealthy``. Error details carry status codes and short body excerpts, never keys.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness.engine.keys import EngineKeys
from harness.engine.launch_spec import LaunchedEngine
from harness.engine.probe import PROBED_EXECUTION_FIELDS
from harness.engine.verify import verify_server_info
from harness.errors import HitchError

__all__ = ["PROBE_OUTPUT_TOKENS", "RESPONSES_BUDGET_OFFSET", "ListenerCheck", "ReadinessReport", "wait_ready"]

# Who listens on the engine's port: "ours" (the engine's process tree), "other" or "none" (yet).
ListenerCheck = Callable[[], Awaitable[str]]

PROBE_OUTPUT_TOKENS = 8
RESPONSES_BUDGET_OFFSET = 2  # SGLang: max_new_tokens = max_output_tokens - 2 on /v1/responses
_POLL_S = 0.1
_PROBE_INPUT = "Reply with one short word."
_SSE_GOOD_END = ("response.completed", "response.incomplete")
_SSE_TERMINAL = (*_SSE_GOOD_END, "response.failed")


@dataclass
class ReadinessReport:
    """When each step passed (seconds since the probe started) and what the engine said about itself."""

    health_s: float | None = None
    server_info_s: float | None = None
    responses_s: float | None = None
    stream_s: float | None = None
    flushed_s: float | None = None
    engine_version: str | None = None
    max_total_num_tokens: int | None = None
    # what the engine reported for the values prepare seals (no secret among them; see probe.py)
    engine_choices: dict[str, Any] = field(default_factory=dict)
    probe_output_tokens: int | None = None
    steps: list[str] = field(default_factory=list)


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.end = self.start + seconds
        self.seconds = seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def since(self) -> float:
        return time.monotonic() - self.start

    def timeout(self, cap: float) -> httpx.Timeout:
        left = max(0.05, min(cap, self.left()))
        return httpx.Timeout(left, connect=min(2.0, left))


def _unhealthy(step: str, message: str, **details: Any) -> HitchError:
    return HitchError("inference_engine_unhealthy", f"readiness probe {step}: {message}", {"step": step, **details})


def _excerpt(resp: httpx.Response) -> str:
    return resp.text[:300]


async def _check_alive(engine: LaunchedEngine, step: str) -> None:
    exit_info = await engine.poll()
    if exit_info is not None:
        code = "inference_oom" if exit_info.oom else "inference_process_exited"
        raise HitchError(
            code,
            f"the engine exited during startup ({exit_info.reason})",
            {"exit_code": exit_info.exit_code, "step": step},
        )


async def _wait_health(
    client: httpx.AsyncClient, engine: LaunchedEngine, deadline: _Deadline, listener: ListenerCheck | None
) -> None:
    proven = listener is None
    while True:
        await _check_alive(engine, "health")
        if deadline.left() <= 0:
            raise HitchError(
                "inference_start_timeout",
                f"the engine was not healthy within {deadline.seconds:.1f}s",
                {"step": "health", "timeout_s": deadline.seconds},
            )
        if not proven and listener is not None:
            state = await listener()
            if state == "other":
                raise HitchError(
                    "inference_port_conflict",
                    "another server listens on the engine's port; it was sent nothing",
                    {"step": "listener", "url": engine.base_url},
                )
            if state != "ours":
                await asyncio.sleep(min(_POLL_S, max(0.0, deadline.left())))
                continue
            proven = True
        try:
            resp = await client.get("/health", timeout=deadline.timeout(5.0))
            if resp.status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet, or still warming up
        await asyncio.sleep(min(_POLL_S, max(0.0, deadline.left())))


async def _server_info(client: httpx.AsyncClient, keys: EngineKeys, deadline: _Deadline) -> dict[str, Any]:
    resp = await client.get("/server_info", headers=_bearer(keys.api_key), timeout=deadline.timeout(30.0))
    if resp.status_code in (401, 403):
        raise HitchError(
            "inference_lock_mismatch",
            "the server on the engine's port rejects this epoch's key: it is not our engine",
            {"fields": ["api_key"], "status": resp.status_code},
        )
    if resp.status_code != 200:
        raise _unhealthy("server_info", f"HTTP {resp.status_code}", status=resp.status_code, body=_excerpt(resp))
    info = resp.json()
    if not isinstance(info, dict):
        raise _unhealthy("server_info", "the body is not a JSON object")
    return info


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _probe_body(wire_model: str, stream: bool) -> dict[str, Any]:
    return {
        "model": wire_model,
        "input": _PROBE_INPUT,
        "max_output_tokens": PROBE_OUTPUT_TOKENS + RESPONSES_BUDGET_OFFSET,
        "temperature": 0.0,
        "stream": stream,
    }


def _output_tokens(usage: Any) -> int | None:
    if not isinstance(usage, dict):
        return None
    for name in ("output_tokens", "completion_tokens"):
        value = usage.get(name)
        if isinstance(value, int):
            return value
    return None


async def _responses(client: httpx.AsyncClient, keys: EngineKeys, wire_model: str, deadline: _Deadline) -> int | None:
    resp = await client.post(
        "/v1/responses", json=_probe_body(wire_model, False), headers=_bearer(keys.api_key), timeout=deadline.timeout(120.0)
    )
    if resp.status_code != 200:
        raise _unhealthy("responses", f"HTTP {resp.status_code}", status=resp.status_code, body=_excerpt(resp))
    body = resp.json()
    if not isinstance(body, dict) or body.get("object") != "response" or body.get("status") not in ("completed", "incomplete"):
        raise _unhealthy("responses", "not a completed Responses object", body=_excerpt(resp))
    produced = _output_tokens(body.get("usage"))
    if produced is not None and produced > PROBE_OUTPUT_TOKENS:
        raise _unhealthy("responses", f"{produced} output tokens for a budget of {PROBE_OUTPUT_TOKENS}", tokens=produced)
    return produced


async def _responses_stream(client: httpx.AsyncClient, keys: EngineKeys, wire_model: str, deadline: _Deadline) -> None:
    events: list[str] = []
    async with client.stream(
        "POST",
        "/v1/responses",
        json=_probe_body(wire_model, True),
        headers=_bearer(keys.api_key),
        timeout=deadline.timeout(120.0),
    ) as resp:
        if resp.status_code != 200:
            await resp.aread()
            raise _unhealthy("responses_stream", f"HTTP {resp.status_code}", status=resp.status_code, body=_excerpt(resp))
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                events.append(line.split(":", 1)[1].strip())
            if events and events[-1] in _SSE_TERMINAL:
                break
    # A budget this small usually ends on the length limit: ``response.incomplete`` is a good end too.
    if not events or events[0] != "response.created" or events[-1] not in _SSE_GOOD_END:
        raise _unhealthy(
            "responses_stream",
            "the SSE stream did not run from response.created to its completion",
            events=events[:2] + events[-3:],
        )


async def _flush_cache(client: httpx.AsyncClient, keys: EngineKeys, deadline: _Deadline) -> None:
    resp = await client.post("/flush_cache", headers=_bearer(keys.admin_key), timeout=deadline.timeout(30.0))
    if resp.status_code != 200:
        raise _unhealthy("flush_cache", f"HTTP {resp.status_code}", status=resp.status_code, body=_excerpt(resp))


async def _probe(
    engine: LaunchedEngine,
    keys: EngineKeys,
    wire_model: str,
    expected: dict[str, Any],
    deadline: _Deadline,
    listener: ListenerCheck | None,
) -> ReadinessReport:
    report = ReadinessReport()
    async with httpx.AsyncClient(base_url=engine.base_url, trust_env=False) as client:
        await _wait_health(client, engine, deadline, listener)
        report.health_s = deadline.since()
        report.steps.append("health")
        info = await _server_info(client, keys, deadline)
        verify_server_info(info, expected, keys)
        report.server_info_s = deadline.since()
        report.engine_version = str(info.get("version")) if info.get("version") is not None else None
        pool = info.get("max_total_num_tokens")
        report.max_total_num_tokens = pool if isinstance(pool, int) else None
        report.engine_choices = {key: info.get(key) for key in PROBED_EXECUTION_FIELDS.values()}
        report.steps.append("server_info")
        await _check_alive(engine, "responses")
        report.probe_output_tokens = await _responses(client, keys, wire_model, deadline)
        report.responses_s = deadline.since()
        report.steps.append("responses")
        await _responses_stream(client, keys, wire_model, deadline)
        report.stream_s = deadline.since()
        report.steps.append("responses_stream")
        await _flush_cache(client, keys, deadline)
        report.flushed_s = deadline.since()
        report.steps.append("flush_cache")
    return report


async def wait_ready(
    engine: LaunchedEngine,
    keys: EngineKeys,
    wire_model: str,
    expected: dict[str, Any],
    timeout_s: float,
    listener: ListenerCheck | None = None,
) -> ReadinessReport:
    """Run the probe sequence; returns once every step passed, raises a HitchError otherwise."""
    deadline = _Deadline(timeout_s)
    try:
        return await asyncio.wait_for(
            _probe(engine, keys, wire_model, expected, deadline, listener), timeout=max(0.01, timeout_s)
        )
    except TimeoutError:
        raise HitchError(
            "inference_start_timeout",
            f"the engine was not ready within {timeout_s:.1f}s",
            {"timeout_s": timeout_s},
        ) from None
    except httpx.HTTPError as exc:
        if deadline.left() <= 0:
            raise HitchError("inference_start_timeout", f"the engine was not ready within {timeout_s:.1f}s", {}) from exc
        await _check_alive(engine, "probe")
        raise _unhealthy("http", type(exc).__name__) from exc
