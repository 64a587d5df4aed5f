"""Requests through a run's gateway and what their answers must satisfy (the protocol and security suites).

Owns a request through a run's gateway URL (:func:`gw_post`, :func:`gw_stream`) and the chat body the
other suites send (:func:`chat_body`), the usage consistency rules for Responses and chat
(:func:`responses_usage_problems`, :func:`chat_usage_problems`), how many requests the session's engine is
running (:func:`engine_running`: the fake's own count, or :func:`~certify.kit.probes.engine_load`), the
gateway evidence row of one request (:func:`evidence_row`), and the forced tool call a model must make
(:data:`FORECAST_TOOL`, :func:`arguments_problem`, :func:`chat_stream_calls`). A scripted private engine is
:func:`certify.kit.stack.scripted_stack`.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped,unused-ignore]

from certify.kit.probes import engine_load, read_evidence, wait_for
from certify.session import CertifyEnv, RunHandle
from gateway.sse import parse_events

__all__ = [
    "CALL_BUDGET",
    "FORCED_PROMPT",
    "FORECAST_SCHEMA",
    "FORECAST_TOOL",
    "OTHER_TOOL",
    "arguments_problem",
    "chat_body",
    "chat_stream_calls",
    "chat_usage_problems",
    "engine_running",
    "evidence_row",
    "gw_post",
    "gw_stream",
    "responses_usage_problems",
]

TIMEOUT = httpx.Timeout(300.0, connect=10.0)


def _headers(run: RunHandle | None, token: str | None, extra: dict[str, str] | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    elif run is not None:
        headers.update(run.headers())
    headers.update(extra or {})
    return headers


def gw_post(run: RunHandle, path: str, body: dict[str, Any], *, extra: dict[str, str] | None = None) -> httpx.Response:
    """One non-streaming POST through the run's gateway URL (``path`` is relative to ``/v1``)."""
    return httpx.post(run.base_url + path, json=body, headers=_headers(run, None, extra), timeout=TIMEOUT)


def gw_stream(run: RunHandle, path: str, body: dict[str, Any]) -> tuple[httpx.Response, bytes]:
    """One streaming POST read to its end: the response (headers, status) and the raw body bytes."""
    with httpx.stream("POST", run.base_url + path, json=body, headers=run.headers(), timeout=TIMEOUT) as r:
        raw = b"".join(r.iter_raw())
    return r, raw


def _nonneg_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def responses_usage_problems(usage: Any) -> list[str]:
    """What is wrong with a Responses ``usage`` object (empty when it is consistent)."""
    if not isinstance(usage, dict):
        return [f"usage is {usage!r}"]
    problems = [
        f"{k} missing or not a non-negative int"
        for k in ("input_tokens", "output_tokens", "total_tokens")
        if not _nonneg_int(usage.get(k))
    ]
    if problems:
        return problems
    if usage["total_tokens"] != usage["input_tokens"] + usage["output_tokens"]:
        problems.append(f"total {usage['total_tokens']} != input {usage['input_tokens']} + output {usage['output_tokens']}")
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None and (not _nonneg_int(reasoning) or reasoning > usage["output_tokens"]):
        problems.append(f"reasoning_tokens {reasoning} is not a subset of output_tokens {usage['output_tokens']}")
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
    if cached is not None and (not _nonneg_int(cached) or cached > usage["input_tokens"]):
        problems.append(f"cached_tokens {cached} is not a subset of input_tokens {usage['input_tokens']}")
    return problems


def chat_usage_problems(usage: Any) -> list[str]:
    """What is wrong with a chat ``usage`` object (empty when it is consistent)."""
    if not isinstance(usage, dict):
        return [f"usage is {usage!r}"]
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    problems = [f"{k} missing or not a non-negative int" for k in keys if not _nonneg_int(usage.get(k))]
    if problems:
        return problems
    if usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]:
        problems.append(
            f"total {usage['total_tokens']} != prompt {usage['prompt_tokens']} + completion {usage['completion_tokens']}"
        )
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if reasoning is not None and (not _nonneg_int(reasoning) or reasoning > usage["completion_tokens"]):
        problems.append(f"reasoning_tokens {reasoning} is not a subset of completion_tokens {usage['completion_tokens']}")
    return problems


def chat_body(model: str, *, stream: bool, max_tokens: int | None = 8, content: str = "hello") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}], "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def engine_running(env: CertifyEnv) -> int:
    """Requests the engine is running or queueing now (looked at behind the gateway; the fake's own count is exact)."""
    if env.fake is not None:
        state = env.fake.state()
        return int(state["num_running_reqs"]) + int(state["num_queue_reqs"])
    return engine_load(env.engine_url, env.engine_headers())


def evidence_row(env: CertifyEnv, run: RunHandle, request_id: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """The gateway's evidence row for ``request_id`` (rows are flushed in the background)."""
    found: list[dict[str, Any]] = []

    def look() -> bool:
        found[:] = [row for row in read_evidence(env.root.gateway_dir, run.binding_id) if row.get("request_id") == request_id]
        return bool(found)

    wait_for(look, timeout_s)
    return found[0] if found else None


# -- forced tool calls (tool_choice required / named) -----------------------------------------------------


# The schema a forced call must satisfy. ``strict`` asks SGLang to hold the arguments to it (xgrammar); the
# enums bound every value, so even a random checkpoint's forced call ends within a small budget.
FORECAST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
FORECAST_TOOL: dict[str, Any] = {
    "name": "get_forecast",
    "description": "Weather forecast for a city",
    "parameters": FORECAST_SCHEMA,
    "strict": True,
}
OTHER_TOOL: dict[str, Any] = {
    "name": "get_time",
    "description": "Local time in a city",
    "parameters": {"type": "object", "properties": {}},
}
CALL_BUDGET = 64
FORCED_PROMPT = "What is the weather forecast in Paris, in celsius?"


def arguments_problem(arguments: Any) -> str | None:
    """Why ``arguments`` (a call's JSON string) does not validate against the forced tool's schema, or None."""
    try:
        jsonschema.validate(json.loads(arguments), FORECAST_SCHEMA)
    except (TypeError, ValueError, jsonschema.ValidationError) as exc:
        return f"arguments {arguments!r} do not validate: {str(exc)[:200]}"
    return None


def chat_stream_calls(raw: bytes) -> tuple[list[dict[str, str]], str]:
    """(name, arguments) of each call a chat stream's deltas assemble, and its finish reason."""
    calls: dict[int, dict[str, str]] = {}
    finish = ""
    for e in parse_events(raw):
        if e.data == "[DONE]":
            continue
        for choice in e.json().get("choices") or []:
            for d in (choice.get("delta") or {}).get("tool_calls") or []:
                call = calls.setdefault(int(d["index"]), {"name": "", "arguments": ""})
                fn = d.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return [calls[i] for i in sorted(calls)], finish
