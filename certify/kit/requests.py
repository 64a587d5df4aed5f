"""Helpers for the protocol and security suites: gateway calls, SSE parsing, usage rules, engine load.

Owns what both suites repeat: a request through a run's gateway URL (:func:`gw_post`, :func:`gw_stream`),
the usage consistency rules for Responses and chat
(:func:`responses_usage_problems`, :func:`chat_usage_problems`), how many requests the engine is running
(:func:`engine_running`: the fake's control API, or real SGLang's ``/v1/loads`` / ``/metrics``), the gateway
evidence row of one request (:func:`evidence_row`), and a private scripted fake engine behind its own
gateway (:class:`ScriptedGateway`) for the checks that need a known model answer (a tool call, an empty
output) — the shared engine is never given a script.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from certify.session import CertifyEnv, RunHandle
from fixtures.fake_sglang.client import FakeEngineProcess, start_fake_engine
from gateway.sse import parse_events

__all__ = [
    "CALL_BUDGET",
    "FORCED_PROMPT",
    "FORECAST_SCHEMA",
    "FORECAST_TOOL",
    "OTHER_TOOL",
    "REPO",
    "ScriptedGateway",
    "arguments_problem",
    "chat_stream_calls",
    "chat_usage_problems",
    "engine_running",
    "evidence_row",
    "gw_post",
    "gw_stream",
    "responses_usage_problems",
    "scripted_gateway",
    "wait_for",
]

REPO = Path(__file__).resolve().parents[2]
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


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes; its last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def engine_running(env: CertifyEnv) -> int:
    """Requests the engine is running or queueing now (looked at behind the gateway)."""
    if env.fake is not None:
        state = env.fake.state()
        return int(state["num_running_reqs"]) + int(state["num_queue_reqs"])
    r = httpx.get(env.engine_url + "/v1/loads", headers=env.engine_headers(), timeout=30)
    if r.status_code == 200:
        loads = r.json().get("loads") or []
        return sum(int(x.get("num_running_reqs", 0)) + int(x.get("num_waiting_reqs", 0)) for x in loads)
    r = httpx.get(env.engine_url + "/metrics", headers=env.engine_headers(), timeout=30)
    r.raise_for_status()
    total = 0.0
    for line in r.text.splitlines():
        if line.startswith(("sglang:num_running_reqs", "sglang:num_queue_reqs")):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def evidence_row(env: CertifyEnv, run: RunHandle, request_id: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """The gateway's evidence row for ``request_id`` (rows are flushed in the background)."""
    path = env.root.root / "inference" / "gateway" / "evidence" / f"{run.binding_id}.requests.jsonl"
    found: list[dict[str, Any]] = []

    def look() -> bool:
        if not path.exists():
            return False
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if row.get("request_id") == request_id:
                    found.append(row)
                    return True
        return False

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
    import jsonschema  # type: ignore[import-untyped,unused-ignore]

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


# -- a private scripted fake engine behind its own gateway ---------------------------------------------------


@dataclass
class ScriptedGateway:
    """A fake engine started with ``--fake-script`` and a gateway (own loop thread) bound to it."""

    run: RunHandle
    engine: FakeEngineProcess

    def ctl(self, method: str, path: str) -> Any:
        return self.engine.ctl(method, path)

    def state(self) -> dict[str, Any]:
        return self.engine.state()


@contextlib.contextmanager
def scripted_gateway(env: CertifyEnv, turns: list[dict[str, Any]], workdir: Path) -> Iterator[ScriptedGateway]:
    """A scripted fake engine (the session's model and sealed lock) behind a private gateway.

    ``turns`` are the fake's script lines (``{"text": ...}`` or ``{"tool_calls": [...]}``), consumed one per
    inference request. Everything lives under ``workdir`` (never under the session's HITCH_ROOT).
    """
    from gateway.bindings import UpstreamTarget
    from gateway.server import GatewayConfig
    from gateway.testing import GatewayThread
    from harness.daemon.core import load_sealed_lock
    from harness.engine.argv import parser_flags
    from harness.store import model_files_dir

    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "script.jsonl"
    script.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    lock = load_sealed_lock(env.root, env.run.inference_id)
    model_dir = model_files_dir(env.root, env.model_id)
    served = env.run.wire_model
    engine = start_fake_engine(model_dir, workdir, "--fake-script", str(script), *parser_flags(lock), served=served)
    gateway: GatewayThread | None = None
    try:
        gateway = GatewayThread(GatewayConfig(state_dir=workdir / "gateway", metrics_port=None))
        target = UpstreamTarget(
            base_url=engine.base,
            engine_key=engine.key,
            service_id="svc-certify-scripted",
            inference_id=lock.inference_id,
            epoch=1,
            lock=lock,
            wire_model=served,
            tokenizer_dir=model_dir,
        )
        record = gateway.register("certify-scripted", target)
        run = RunHandle(
            run_id=record.run_id,
            binding_id=record.binding_id,
            service_id=record.service_id,
            inference_id=record.inference_id,
            epoch=record.epoch,
            base_url=record.base_url,
            wire_model=record.wire_model,
            token=gateway.token_of(record),
        )
        yield ScriptedGateway(run, engine)
    finally:
        if gateway is not None:
            gateway.close()
        engine.stop()
