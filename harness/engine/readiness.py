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
5. the engine is idle: SGLang frees a finished request's slot in its scheduler loop, after the reply's last
   byte (seen lagging by seconds under load and behind Docker's proxy), so readiness polls ``/v1/loads``
   (``load.py``) until no request runs or waits, and records how long that took. SGLang publishes that load
   every 15 decode iterations (``--load-snapshot-publish-interval``), so it can lag either way: it spares a
   flush sent while the engine is plainly busy, and the deferred flush below is the authority;
6. ``POST /flush_cache?timeout=T`` with the admin key, so the first real request finds an empty cache
   (SGLang 0.5.23 defers a flush with a timeout until its scheduler is idle). A flush refused *for pending
   requests* (SGLang's own messages, ``_FLUSH_PENDING``) is retried after the next idle wait, within the
   deadline; any other refusal fails readiness with the engine's message in the error's details.

The tool-call probe (spec §9.1 step 5: Responses, SSE *and tool calls, as the caller needs*) is
:func:`probe_tool_call`, asked per acquire by a caller that needs tool calls of a lock that claims them (the
daemon, for a Codex run): a non-streaming ``/v1/responses`` request that names one probe tool in
``tool_choice``, whose answer must carry a ``function_call`` item of that tool with a JSON-object ``arguments``
(SGLang's grammar forces the call's start; the model writes its arguments; the lock's parser must hand it back
structured) within ``TOOL_PROBE_OUTPUT_TOKENS``; the probe tool is ``strict`` with enum-bound arguments, so the
grammar holds the whole call. It runs per caller that needs it, not at every start, as the spec words it.

Each probe's reply is read to its end (a stream too), never left for the engine to discover. Failing the
deadline is ``inference_start_timeout`` (an engine that never went idle says so, with its counts); a wrong
answer to a probe is ``inference_engine_unhealthy``. Error details carry status codes and short body
excerpts, never keys.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness.engine.keys import EngineKeys
from harness.engine.launch_spec import LaunchedEngine
from harness.engine.load import LOADS_PATH, EngineLoad, load_from_loads
from harness.engine.probe import PROBED_EXECUTION_FIELDS
from harness.engine.verify import verify_server_info
from harness.errors import HitchError

__all__ = [
    "PROBE_OUTPUT_TOKENS",
    "RESPONSES_BUDGET_OFFSET",
    "TOOL_PROBE_NAME",
    "TOOL_PROBE_OUTPUT_TOKENS",
    "ListenerCheck",
    "ReadinessReport",
    "flush_when_idle",
    "probe_tool_call",
    "wait_ready",
]

# Who listens on the engine's port: "ours" (the engine's process tree), "other" or "none" (yet).
ListenerCheck = Callable[[], Awaitable[str]]

PROBE_OUTPUT_TOKENS = 8
TOOL_PROBE_OUTPUT_TOKENS = 64  # a hermes call of the probe tool is about 25 tokens; SmolLM2 needs the margin
TOOL_PROBE_NAME = "hitch_readiness_probe"
_TOOL_PROBE_INPUT = "Call the tool."
# ``strict`` asks SGLang to hold the arguments to the schema (xgrammar) and the enum bounds the one value, so the
# forced call ends within the budget whatever the weights (without it, SGLang 0.5.23 constrains only the call's
# start, and a random checkpoint writes its arguments until the budget runs out)
_TOOL_PROBE_TOOL = {
    "type": "function",
    "name": TOOL_PROBE_NAME,
    "description": "Report the engine's state.",
    "parameters": {
        "type": "object",
        "properties": {"state": {"type": "string", "enum": ["ready"]}},
        "required": ["state"],
        "additionalProperties": False,
    },
    "strict": True,
}
RESPONSES_BUDGET_OFFSET = 2  # SGLang: max_new_tokens = max_output_tokens - 2 on /v1/responses
_POLL_S = 0.1
_PROBE_INPUT = "Reply with one short word."
_SSE_GOOD_END = ("response.completed", "response.incomplete")
# SGLang's bodies for a flush refused because requests run or wait: 0.5.23's http_server.py when the scheduler
# was busy ("Flush cache failed."), its flush_wrapper.py for a deferred flush that timed out or overlapped
# another, and the text of releases before 0.5.20.
_FLUSH_PENDING = (
    "Flush cache failed",
    "Timed out waiting for idle state",
    "Another flush_cache is already in progress",
    "Cache not flushed",
)
_FLUSH_DEFER_S = 10.0  # how long one deferred flush may wait for idle inside the engine
_FLUSH_REPLY_S = 5.0  # what the engine may take to answer a flush beyond its deferral (a loaded machine)
_DEADLINE_GRACE_S = _FLUSH_REPLY_S + 1.0  # the outer bound's margin, so a step out of time can say which and why


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
    # the wait for the engine to go idle before the flush: seconds, polls that found it busy, the last load
    idle_wait_s: float | None = None
    busy_polls: int = 0
    last_load: EngineLoad | None = None
    flush_attempts: int = 0
    flush_refusals: list[str] = field(default_factory=list)  # the engine's texts of refused flushes (pending)
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
        # Read to the end, past the terminal event: a reply left unread is one the engine finds out about later.
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                events.append(line.split(":", 1)[1].strip())
    # A budget this small usually ends on the length limit: ``response.incomplete`` is a good end too.
    if not events or events[0] != "response.created" or events[-1] not in _SSE_GOOD_END:
        raise _unhealthy(
            "responses_stream",
            "the SSE stream did not run from response.created to its completion",
            events=events[:2] + events[-3:],
        )


async def _tool_call(client: httpx.AsyncClient, api_key: str, wire_model: str, deadline: _Deadline) -> None:
    body = {
        "model": wire_model,
        "input": _TOOL_PROBE_INPUT,
        "tools": [_TOOL_PROBE_TOOL],
        "tool_choice": {"type": "function", "name": TOOL_PROBE_NAME},
        "max_output_tokens": TOOL_PROBE_OUTPUT_TOKENS + RESPONSES_BUDGET_OFFSET,
        "temperature": 0.0,
        "stream": False,
    }
    # one request of up to 64 tokens: on a loaded CPU engine it may take most of the bound, which is the caller's
    resp = await client.post("/v1/responses", json=body, headers=_bearer(api_key), timeout=deadline.timeout(deadline.seconds))
    if resp.status_code != 200:
        raise _unhealthy("tool_call", f"HTTP {resp.status_code}", status=resp.status_code, body=_excerpt(resp))
    answer = resp.json()
    output = answer.get("output") if isinstance(answer, dict) else None
    calls = [i for i in output or [] if isinstance(i, dict) and i.get("type") == "function_call"]
    if not calls or calls[0].get("name") != TOOL_PROBE_NAME:
        raise _unhealthy(
            "tool_call",
            f"the lock claims tool calls, and a call forced to {TOOL_PROBE_NAME} came back without one",
            items=[i.get("type") for i in output or [] if isinstance(i, dict)],
            body=_excerpt(resp),
        )
    try:
        arguments = json.loads(str(calls[0].get("arguments")))
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise _unhealthy("tool_call", "the forced call's arguments are not a JSON object", body=_excerpt(resp))


async def probe_tool_call(base_url: str, api_key: str, wire_model: str, timeout_s: float) -> float:
    """The tool-call probe on its own (see the module docstring); the seconds it took, or a HitchError."""
    deadline = _Deadline(timeout_s)
    try:
        async with httpx.AsyncClient(base_url=base_url, trust_env=False) as client:
            await _tool_call(client, api_key, wire_model, deadline)
    except httpx.HTTPError as exc:
        raise _unhealthy("tool_call", type(exc).__name__) from exc
    return round(deadline.since(), 3)


async def _engine_load(client: httpx.AsyncClient, keys: EngineKeys, deadline: _Deadline) -> EngineLoad | None:
    """The engine's running and waiting requests, or ``None`` when it does not say (no ``/v1/loads``)."""
    resp = await client.get(LOADS_PATH, headers=_bearer(keys.api_key), timeout=deadline.timeout(10.0))
    if resp.status_code != 200:
        return None
    try:
        return load_from_loads(resp.json())
    except ValueError:
        return None


async def _wait_idle(client: httpx.AsyncClient, keys: EngineKeys, deadline: _Deadline, report: ReadinessReport) -> None:
    """Poll until the engine reports nothing running or waiting (an engine without ``/v1/loads`` is left to
    the deferred flush); adds the wait to ``report.idle_wait_s``."""
    t0 = time.monotonic()
    try:
        while True:
            load = await _engine_load(client, keys, deadline)
            report.last_load = load
            if load is None or load.idle:
                return
            report.busy_polls += 1
            if deadline.left() <= _POLL_S:
                raise HitchError(
                    "inference_start_timeout",
                    f"the engine still reported {load.running} running and {load.waiting} waiting requests when "
                    f"its {deadline.seconds:.1f}s startup bound ran out; its cache was not flushed",
                    {"step": "idle", "running": load.running, "waiting": load.waiting, "timeout_s": deadline.seconds},
                )
            await asyncio.sleep(_POLL_S)
    finally:
        report.idle_wait_s = round((report.idle_wait_s or 0.0) + time.monotonic() - t0, 3)


async def _flush_cache(client: httpx.AsyncClient, keys: EngineKeys, deadline: _Deadline, report: ReadinessReport) -> None:
    while True:
        await _wait_idle(client, keys, deadline, report)
        # the engine answers a deferred flush when it is idle or the deferral ran out; the read waits for that
        # answer plus a reply margin, so the two never race (with less time left than the margin: no deferral)
        defer = min(_FLUSH_DEFER_S, max(0.0, deadline.left() - _FLUSH_REPLY_S))
        resp = await client.post(
            "/flush_cache",
            params={"timeout": f"{defer:.3f}"},
            headers=_bearer(keys.admin_key),
            timeout=httpx.Timeout(defer + _FLUSH_REPLY_S, connect=2.0),
        )
        report.flush_attempts += 1
        if resp.status_code == 200:
            return
        text = _excerpt(resp).strip()
        if resp.status_code != 400 or not text.startswith(_FLUSH_PENDING):
            raise _unhealthy("flush_cache", f"HTTP {resp.status_code}: {text[:120]}", status=resp.status_code, body=text)
        report.flush_refusals.append(text)
        if deadline.left() <= _POLL_S:
            raise HitchError(
                "inference_start_timeout",
                f"the engine refused to flush its cache for pending requests until its {deadline.seconds:.1f}s "
                f"startup bound ran out ({report.flush_attempts} attempts): {text[:120]}",
                {"step": "flush_cache", "attempts": report.flush_attempts, "body": text, "timeout_s": deadline.seconds},
            )


async def flush_when_idle(
    base_url: str, keys: EngineKeys, timeout_s: float, report: ReadinessReport | None = None
) -> ReadinessReport:
    """Readiness's last step on its own: wait until the engine is idle, then flush its cache, within
    ``timeout_s``. Fills ``report`` as it goes (a caller may watch ``busy_polls``), and returns it."""
    report = report if report is not None else ReadinessReport()
    deadline = _Deadline(timeout_s)
    async with httpx.AsyncClient(base_url=base_url, trust_env=False) as client:
        await _flush_cache(client, keys, deadline, report)
    report.flushed_s = deadline.since()
    return report


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
        await _flush_cache(client, keys, deadline, report)
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
            _probe(engine, keys, wire_model, expected, deadline, listener), timeout=max(0.01, timeout_s) + _DEADLINE_GRACE_S
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
