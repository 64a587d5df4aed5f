"""protocol: the OpenAI surface a harness uses works through the gateway, with exact budgets and usage.

Responses and chat completions, stream and non-stream (raw HTTP and the official ``openai`` SDK); usage
present and consistent (total = input + output, reasoning and cached tokens are subsets, the gateway's
evidence row says what the client saw); the output budget honoured exactly (``max_output_tokens`` /
``max_tokens``: never more, ``incomplete`` / ``length`` when it is hit) and a budget above the lock's
refused with ``inference_parameter_conflict`` before the engine; tool calls (a scripted fake engine returns
one; against any engine a ``tools`` request and a ``function_call_output`` continuation are accepted and
well-formed); the gateway's context count equal to real SGLang's prompt tokens (agent-shaped requests);
empty output; a stream closed mid-way leaves no running request behind; ``GET /v1/models``
lists only the wire model.

Real SGLang here runs a tiny random-weights model: its text is garbage and it may stop early, so the checks
assert protocol shape and counts, never text.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from certify.kit.requests import (
    CALL_BUDGET,
    FORCED_PROMPT,
    FORECAST_TOOL,
    OTHER_TOOL,
    arguments_problem,
    chat_stream_calls,
    chat_usage_problems,
    engine_running,
    evidence_row,
    gw_post,
    gw_stream,
    responses_usage_problems,
    scripted_gateway,
    wait_for,
)
from certify.registry import check
from certify.session import CertifyEnv
from certify.suites._prompt_cases import CASES, prompt_counts
from gateway.sse import SseEvent, parse_events

PROMPT = "Say hello."
SMALL = 8  # an output budget small enough for every engine here


def _cap(env: CertifyEnv) -> int:
    from harness.daemon.core import load_sealed_lock

    return int(load_sealed_lock(env.root, env.run.inference_id).generation.max_output_tokens)


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, f"{r.status_code}: {r.text[:500]}"
    body = r.json()
    assert isinstance(body, dict)
    return body


def _output_text(resp: dict[str, Any]) -> str:
    parts: list[str] = []
    for item in resp.get("output") or []:
        if item.get("type") == "message":
            for c in item.get("content") or []:
                if c.get("type") == "output_text":
                    parts.append(str(c.get("text", "")))
    return "".join(parts)


def _check_response(resp: dict[str, Any], budget: int | None = None) -> None:
    assert resp.get("object") == "response", resp.get("object")
    assert isinstance(resp.get("id"), str) and resp["id"]
    assert resp.get("status") in ("completed", "incomplete"), resp.get("status")
    assert isinstance(resp.get("output"), list)
    for item in resp["output"]:
        assert item.get("type") in ("message", "function_call", "reasoning"), item
    problems = responses_usage_problems(resp.get("usage"))
    assert not problems, problems
    out = resp["usage"]["output_tokens"]
    if resp["status"] == "incomplete":
        assert (resp.get("incomplete_details") or {}).get("reason") == "max_output_tokens", resp.get("incomplete_details")
        if budget is not None:
            assert out == budget, f"incomplete at {out} output tokens, budget {budget}"
    elif budget is not None:
        assert out < budget, f"completed with {out} output tokens at budget {budget} (should be incomplete)"


def _check_chat(body: dict[str, Any], budget: int | None = None) -> dict[str, Any]:
    assert body.get("object") == "chat.completion", body.get("object")
    choices = body.get("choices")
    assert isinstance(choices, list) and len(choices) == 1, choices
    choice = choices[0]
    assert choice.get("message", {}).get("role") == "assistant"
    assert choice.get("finish_reason") in ("stop", "length", "tool_calls"), choice.get("finish_reason")
    problems = chat_usage_problems(body.get("usage"))
    assert not problems, problems
    out = body["usage"]["completion_tokens"]
    if budget is not None:
        if choice["finish_reason"] == "length":
            assert out == budget, f"finish length at {out} tokens, budget {budget}"
        else:
            assert out < budget, f"finish {choice['finish_reason']} with {out} tokens at budget {budget}"
    return dict(choice)


def _responses_stream(events: list[SseEvent], budget: int | None = None) -> dict[str, Any]:
    """Check a Responses event stream; the terminal event's response."""
    assert events, "no events"
    kinds = [e.event for e in events]
    assert kinds[0] == "response.created", kinds[:3]
    seqs = [e.json().get("sequence_number") for e in events]
    assert seqs == list(range(len(events))), f"sequence numbers {seqs[:10]}..."
    terminal = [k for k in kinds if k in ("response.completed", "response.incomplete", "response.failed")]
    assert terminal and kinds[-1] == terminal[0] and len(terminal) == 1, f"terminal events {terminal}, last {kinds[-1]}"
    assert kinds[-1] != "response.failed", events[-1].data[:500]
    for e in events:
        assert e.json().get("type") == e.event, f"event {e.event} carries type {e.json().get('type')}"
    final = events[-1].json()["response"]
    _check_response(final, budget)
    deltas = "".join(e.json().get("delta", "") for e in events if e.event == "response.output_text.delta")
    assert deltas == _output_text(final), "the deltas do not add up to the final output text"
    assert isinstance(final, dict)
    return final


def _chat_stream(raw: bytes, budget: int | None = None) -> tuple[str, str, dict[str, Any]]:
    """Check a chat SSE stream (with include_usage); (content, finish_reason, usage)."""
    events = parse_events(raw)
    assert events and events[-1].data == "[DONE]", "the stream does not end with [DONE]"
    chunks = [e.json() for e in events[:-1]]
    for c in chunks:
        assert "error" not in c, c
        assert c.get("object") == "chat.completion.chunk", c.get("object")
    content = "".join((c["choices"][0].get("delta") or {}).get("content") or "" for c in chunks if c.get("choices"))
    finishes = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices") and c["choices"][0].get("finish_reason")]
    assert len(finishes) == 1, f"finish reasons {finishes}"
    usages = [c["usage"] for c in chunks if c.get("usage")]
    assert usages, "no usage chunk although include_usage was asked"
    usage = usages[-1]
    problems = chat_usage_problems(usage)
    assert not problems, problems
    if budget is not None:
        if finishes[0] == "length":
            assert usage["completion_tokens"] == budget
        else:
            assert usage["completion_tokens"] < budget
    return content, str(finishes[0]), dict(usage)


# -- Responses and chat, stream and non-stream ---------------------------------------------------------------


@check("protocol.responses.nonstream", description="POST /v1/responses (non-stream) answers a well-formed response")
def test_responses_nonstream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    r = gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": SMALL})
    resp = _ok(r)
    _check_response(resp, SMALL)
    assert r.headers.get("x-hitch-request-id"), "no gateway request id header"
    certify_record.detail("status", resp["status"])
    certify_record.detail("usage", resp["usage"])


@check("protocol.responses.stream", description="POST /v1/responses (stream) sends typed events ending in a terminal event")
def test_responses_stream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    r, raw = gw_stream(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": SMALL, "stream": True})
    assert r.status_code == 200, raw[:500]
    assert r.headers.get("content-type", "").startswith("text/event-stream")
    events = parse_events(raw)
    final = _responses_stream(events, SMALL)
    certify_record.detail("events", len(events))
    certify_record.detail("terminal", events[-1].event)
    certify_record.detail("usage", final["usage"])


@check("protocol.chat.nonstream", description="POST /v1/chat/completions (non-stream) answers a well-formed completion")
def test_chat_nonstream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    body = {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": SMALL}
    resp = _ok(gw_post(run, "/chat/completions", body))
    choice = _check_chat(resp, SMALL)
    assert resp.get("model") == run.wire_model, resp.get("model")
    certify_record.detail("finish_reason", choice["finish_reason"])
    certify_record.detail("usage", resp["usage"])


@check("protocol.chat.stream", description="POST /v1/chat/completions (stream) sends chunks, usage and [DONE]")
def test_chat_stream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    body = {
        "model": run.wire_model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": SMALL,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r, raw = gw_stream(run, "/chat/completions", body)
    assert r.status_code == 200, raw[:500]
    assert r.headers.get("content-type", "").startswith("text/event-stream")
    _, finish, usage = _chat_stream(raw, SMALL)
    certify_record.detail("finish_reason", finish)
    certify_record.detail("usage", usage)


@check("protocol.sdk.openai", description="the official openai SDK works unchanged (Responses and chat, stream and not)")
def test_openai_sdk(certify_env: CertifyEnv, certify_record: Any) -> None:
    import openai

    run = certify_env.run
    client = openai.OpenAI(base_url=run.base_url, api_key=run.token, max_retries=0, timeout=300)
    resp = client.responses.create(model=run.wire_model, input=PROMPT, max_output_tokens=SMALL)
    assert resp.status in ("completed", "incomplete") and resp.usage is not None
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    kinds: list[str] = []
    final = None
    # responses.create(stream=True), not the responses.stream() helper: the helper insists on
    # response.completed, and a budget-limited stream legitimately ends with response.incomplete.
    for event in client.responses.create(model=run.wire_model, input=PROMPT, max_output_tokens=SMALL, stream=True):
        kinds.append(event.type)
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert final is not None, f"no terminal event in {kinds}"
    assert final.usage is not None and final.usage.output_tokens <= SMALL
    chat = client.chat.completions.create(model=run.wire_model, messages=[{"role": "user", "content": PROMPT}], max_tokens=SMALL)
    assert chat.usage is not None and chat.usage.completion_tokens <= SMALL
    chunks = list(
        client.chat.completions.create(
            model=run.wire_model,
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=SMALL,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks and chunks[-1].usage is not None
    certify_record.detail("sdk_version", openai.__version__)
    certify_record.detail("responses_stream_events", sorted(set(kinds)))
    certify_record.detail("chat_stream_chunks", len(chunks))


# -- usage and budgets ---------------------------------------------------------------------------------------


@check("protocol.usage.evidence", description="the gateway's evidence row records the usage the client saw, reasoning not added")
def test_usage_matches_evidence(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    seen: dict[str, Any] = {}
    r = gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": SMALL})
    resp = _ok(r)
    row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
    assert row is not None, "no evidence row for the Responses request"
    usage = resp["usage"]
    assert (row["input_tokens"], row["output_tokens"]) == (usage["input_tokens"], usage["output_tokens"]), (row, usage)
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    assert row["reasoning_tokens"] in (None, reasoning), (row["reasoning_tokens"], reasoning)
    assert row["max_output_tokens"] == SMALL and row["status"] in ("completed", "incomplete"), row
    seen["responses"] = {"row": {k: row[k] for k in ("input_tokens", "output_tokens", "reasoning_tokens")}, "usage": usage}
    body = {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}]}
    r = gw_post(run, "/chat/completions", {**body, "max_tokens": SMALL})
    chat = _ok(r)
    row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
    assert row is not None, "no evidence row for the chat request"
    cu = chat["usage"]
    assert (row["input_tokens"], row["output_tokens"]) == (cu["prompt_tokens"], cu["completion_tokens"]), (row, cu)
    seen["chat"] = {"row": {k: row[k] for k in ("input_tokens", "output_tokens", "reasoning_tokens")}, "usage": cu}
    certify_record.detail("compared", seen)


@check("protocol.budget.responses", description="max_output_tokens is honoured exactly; hitting it is status incomplete")
def test_budget_responses(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    got: dict[str, Any] = {}
    for budget in (1, 3, SMALL):
        resp = _ok(gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": budget}))
        _check_response(resp, budget)
        got[str(budget)] = [resp["status"], resp["usage"]["output_tokens"], resp.get("max_output_tokens")]
        if certify_env.engine == "fake":  # the fake never stops early: the budget is hit exactly
            assert resp["status"] == "incomplete" and resp["usage"]["output_tokens"] == budget, resp["usage"]
    r, raw = gw_stream(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": 3, "stream": True})
    assert r.status_code == 200
    events = parse_events(raw)
    final = _responses_stream(events, 3)
    got["stream-3"] = [events[-1].event, final["usage"]["output_tokens"]]
    if certify_env.engine == "fake":
        assert events[-1].event == "response.incomplete"
    certify_record.detail("budget -> [status, output_tokens, echoed max_output_tokens]", got)


@check("protocol.budget.chat", description="max_tokens / max_completion_tokens honoured exactly; hitting it is finish length")
def test_budget_chat(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    base = {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}]}
    got: dict[str, Any] = {}
    for field_name, budget in (("max_tokens", 1), ("max_tokens", 3), ("max_completion_tokens", SMALL)):
        resp = _ok(gw_post(run, "/chat/completions", {**base, field_name: budget}))
        choice = _check_chat(resp, budget)
        got[f"{field_name}={budget}"] = [choice["finish_reason"], resp["usage"]["completion_tokens"]]
        if certify_env.engine == "fake":
            assert choice["finish_reason"] == "length" and resp["usage"]["completion_tokens"] == budget
    body = {**base, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    r, raw = gw_stream(run, "/chat/completions", body)
    assert r.status_code == 200
    _, finish, usage = _chat_stream(raw, 3)
    got["stream max_tokens=3"] = [finish, usage["completion_tokens"]]
    certify_record.detail("budget -> [finish_reason, completion_tokens]", got)


@check("protocol.budget.above_lock", description="a budget above the lock's is 400 inference_parameter_conflict, never forwarded")
def test_budget_above_lock(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    cap = _cap(certify_env)
    if certify_env.fake is not None:
        certify_env.fake.ctl("DELETE", "/requests")
    bodies = [
        ("/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": cap + 1}),
        ("/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": cap + 1, "stream": True}),
        (
            "/chat/completions",
            {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": cap + 1},
        ),
        (
            "/chat/completions",
            {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}], "max_completion_tokens": cap + 1},
        ),
    ]
    rows: list[dict[str, Any]] = []
    for path, body in bodies:
        r = gw_post(run, path, body)
        assert r.status_code == 400, f"{path}: {r.status_code} {r.text[:300]}"
        err = r.json()["error"]
        assert err["code"] == "inference_parameter_conflict", err
        row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
        assert row is not None, "no evidence row for a refused request"
        assert row["status"] == "rejected" and row["engine_rid"] is None, row  # refused before the engine
        rows.append({k: row[k] for k in ("status", "error_code", "http_status")})
    if certify_env.fake is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        reached = [q["path"] for q in certify_env.fake.received()]
        assert not reached, f"refused requests reached the engine: {reached}"
    if certify_env.fake is not None:  # the default budget is the lock's (the fake never stops early)
        resp = _ok(
            gw_post(run, "/chat/completions", {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}]})
        )
        assert resp["usage"]["completion_tokens"] == cap, resp["usage"]
    certify_record.detail("lock_max_output_tokens", cap)
    certify_record.detail("refused", rows)


# -- empty output and tool calls -----------------------------------------------------------------------------


@check("protocol.output.empty", engines=("fake",), description="an empty model answer is a well-formed completed response")
def test_empty_output(certify_env: CertifyEnv, certify_record: Any, tmp_path: Path) -> None:
    with scripted_gateway(certify_env, [{"text": ""}] * 4, tmp_path) as sg:
        run = sg.run
        resp = _ok(gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT}))
        _check_response(resp)
        assert resp["status"] == "completed" and _output_text(resp) == "", resp
        _, raw = gw_stream(run, "/responses", {"model": run.wire_model, "input": PROMPT, "stream": True})
        final = _responses_stream(parse_events(raw))
        assert final["status"] == "completed" and _output_text(final) == ""
        body = {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}]}
        chat = _ok(gw_post(run, "/chat/completions", body))
        choice = _check_chat(chat)
        assert choice["finish_reason"] == "stop" and not choice["message"].get("content"), choice
        _, raw = gw_stream(run, "/chat/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
        content, finish, usage = _chat_stream(raw)
        assert content == "" and finish == "stop"
        assert sg.state()["script_remaining"] == 0
    certify_record.detail("responses_usage", resp["usage"])
    certify_record.detail("chat_usage", usage)


def _weather_tool() -> dict[str, Any]:
    return {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }


def _chat_tool() -> dict[str, Any]:
    tool = _weather_tool()
    return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}


@check("protocol.tools.scripted", engines=("fake",), description="a scripted tool call comes back as function_call / tool_calls")
def test_tool_call_scripted(certify_env: CertifyEnv, certify_record: Any, tmp_path: Path) -> None:
    call: dict[str, Any] = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    turns = [call, {"text": "It is sunny."}, call, call]
    with scripted_gateway(certify_env, turns, tmp_path) as sg:
        run = sg.run
        req = {"model": run.wire_model, "input": "Weather in Paris?", "tools": [_weather_tool()]}
        resp = _ok(gw_post(run, "/responses", req))
        _check_response(resp)
        calls = [i for i in resp["output"] if i["type"] == "function_call"]
        assert len(calls) == 1, resp["output"]
        fc = calls[0]
        assert fc["name"] == "get_weather" and json.loads(fc["arguments"]) == {"city": "Paris"}, fc
        assert str(fc["call_id"]).startswith("call_"), fc
        follow = {
            **req,
            "input": [
                {"type": "message", "role": "user", "content": "Weather in Paris?"},
                {"type": "function_call", "call_id": fc["call_id"], "name": fc["name"], "arguments": fc["arguments"]},
                {"type": "function_call_output", "call_id": fc["call_id"], "output": '{"sky": "sunny"}'},
            ],
        }
        answer = _ok(gw_post(run, "/responses", follow))
        _check_response(answer)
        assert _output_text(answer) == "It is sunny.", answer["output"]
        _, raw = gw_stream(run, "/responses", {**req, "stream": True})
        final = _responses_stream(parse_events(raw))
        assert [i["type"] for i in final["output"]].count("function_call") == 1, final["output"]
        kinds = {e.event for e in parse_events(raw)}
        assert "response.function_call_arguments.done" in kinds or "response.output_item.done" in kinds, kinds
        chat_req = {"model": run.wire_model, "messages": [{"role": "user", "content": "Weather?"}], "tools": [_chat_tool()]}
        chat = _ok(gw_post(run, "/chat/completions", chat_req))
        choice = _check_chat(chat)
        assert choice["finish_reason"] == "tool_calls", choice
        tc = choice["message"]["tool_calls"]
        assert len(tc) == 1 and tc[0]["function"]["name"] == "get_weather", tc
        assert json.loads(tc[0]["function"]["arguments"]) == {"city": "Paris"}
    certify_record.detail("responses_call", {k: fc[k] for k in ("name", "arguments")})
    certify_record.detail("continuation_status", answer["status"])
    certify_record.detail("chat_finish_reason", choice["finish_reason"])


@check("protocol.tools.accepted", description="tools and a function_call_output continuation are accepted and well-formed")
def test_tools_accepted(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    req = {"model": run.wire_model, "input": "Weather in Paris?", "tools": [_weather_tool()], "max_output_tokens": SMALL}
    resp = _ok(gw_post(run, "/responses", req))
    _check_response(resp, SMALL)
    follow = {
        **req,
        "input": [
            {"type": "message", "role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_certify0001", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_certify0001", "output": '{"sky": "sunny"}'},
        ],
    }
    answer = _ok(gw_post(run, "/responses", follow))
    _check_response(answer, SMALL)
    assert answer["usage"]["input_tokens"] > resp["usage"]["input_tokens"], "the continuation's history was not sent"
    chat_req = {
        "model": run.wire_model,
        "max_tokens": SMALL,
        "tools": [_chat_tool()],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_certify0001",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_certify0001", "content": '{"sky": "sunny"}'},
        ],
    }
    chat = _ok(gw_post(run, "/chat/completions", chat_req))
    _check_chat(chat, SMALL)
    certify_record.detail("first_output_types", [i["type"] for i in resp["output"]])
    certify_record.detail("input_tokens", [resp["usage"]["input_tokens"], answer["usage"]["input_tokens"]])
    certify_record.detail("chat_finish_reason", chat["choices"][0]["finish_reason"])


def _chat_calls(message: dict[str, Any]) -> list[dict[str, str]]:
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in message.get("tool_calls") or []]


def _item_calls(output: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"name": i["name"], "arguments": i["arguments"]} for i in output if i["type"] == "function_call"]


@check(
    "protocol.tools.forced",
    description="tool_choice required and named: structured tool_calls / function_call items whose arguments "
    "validate, stream and non-stream, relayed unchanged and counted in evidence",
)
def test_tools_forced(certify_env: CertifyEnv, certify_record: Any) -> None:
    """Real SGLang parses a forced call only with the lock's ``--tool-call-parser`` (without one, chat returns
    the call as message text); the fake answers a forced call the same way (the smallest valid arguments).
    Each answer through the gateway must hold exactly one structured call of the forced tool whose arguments
    validate against its schema; the same request sent to the engine directly (temperature 0) gives the same
    call, so the gateway relayed it unchanged; the evidence row counts it."""
    from harness.daemon.core import load_sealed_lock

    run = certify_env.run
    lock = load_sealed_lock(certify_env.root, run.inference_id)
    assert lock.protocol.tool_calls and lock.protocol.tool_call_parser, (
        f"the lock claims no tool calls (parser {lock.protocol.tool_call_parser!r}): the model's chat template "
        "names no tool-call format; give one at `hitch models add --tool-call-parser`"
    )

    def direct(path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(certify_env.engine_url + "/v1" + path, json=body, headers=certify_env.engine_headers(), timeout=600)
        return _ok(r)

    chat_tools = [{"type": "function", "function": t} for t in (FORECAST_TOOL, OTHER_TOOL)]
    resp_tools = [{"type": "function", **t} for t in (FORECAST_TOOL, OTHER_TOOL)]
    choices: dict[str, tuple[Any, Any]] = {
        "required": ("required", "required"),
        "named": ({"type": "function", "function": {"name": "get_forecast"}}, {"type": "function", "name": "get_forecast"}),
    }
    seen: dict[str, Any] = {}
    problems: list[str] = []
    for label, (chat_choice, resp_choice) in choices.items():
        chat_body = {
            "model": run.wire_model,
            "messages": [{"role": "user", "content": FORCED_PROMPT}],
            "tools": chat_tools,
            "tool_choice": chat_choice,
            "temperature": 0.0,  # the lock's: the direct engine request then samples like the gateway's
            "max_tokens": CALL_BUDGET,
        }
        r = gw_post(run, "/chat/completions", chat_body)
        chat = _ok(r)
        message = _check_chat(chat)["message"]
        calls = _chat_calls(message)
        engine = _chat_calls(direct("/chat/completions", chat_body)["choices"][0]["message"])
        row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
        seen[f"chat.{label}"] = {"calls": calls, "finish": chat["choices"][0]["finish_reason"], "content": message.get("content")}
        problems += _forced_problems(f"chat {label}", calls, engine, row)
        _, raw = gw_stream(run, "/chat/completions", {**chat_body, "stream": True})
        calls, finish = chat_stream_calls(raw)
        seen[f"chat.{label}.stream"] = {"calls": calls, "finish": finish}
        problems += _forced_problems(f"chat {label} stream", calls, engine, None)

        resp_body = {
            "model": run.wire_model,
            "input": FORCED_PROMPT,
            "tools": resp_tools,
            "tool_choice": resp_choice,
            "temperature": 0.0,
            "max_output_tokens": CALL_BUDGET,
        }
        r = gw_post(run, "/responses", resp_body)
        resp = _ok(r)
        _check_response(resp)
        calls = _item_calls(resp["output"])
        engine = _item_calls(direct("/responses", resp_body)["output"])
        row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
        seen[f"responses.{label}"] = {"calls": calls, "output_types": [i["type"] for i in resp["output"]]}
        problems += _forced_problems(f"responses {label}", calls, engine, row)
        _, raw = gw_stream(run, "/responses", {**resp_body, "stream": True})
        calls = _item_calls(_responses_stream(parse_events(raw))["output"])
        seen[f"responses.{label}.stream"] = {"calls": calls}
        problems += _forced_problems(f"responses {label} stream", calls, engine, None)
    certify_record.detail("tool_call_parser", lock.protocol.tool_call_parser)
    certify_record.detail("answers", seen)
    assert not problems, problems


def _forced_problems(
    what: str, calls: list[dict[str, str]], engine: list[dict[str, str]], row: dict[str, Any] | None
) -> list[str]:
    """What is wrong with the calls of one answer: not exactly one structured call of the forced tool,
    arguments that do not validate, a call other than the engine's own answer, an evidence row not counting it."""
    if len(calls) != 1 or calls[0]["name"] != "get_forecast":
        return [f"{what}: expected one structured get_forecast call, got {calls}"]
    problem = arguments_problem(calls[0]["arguments"])
    if problem:
        return [f"{what}: {problem}"]
    out = []
    if (
        len(engine) != 1
        or engine[0]["name"] != calls[0]["name"]
        or arguments_problem(engine[0]["arguments"])
        or (json.loads(engine[0]["arguments"]) != json.loads(calls[0]["arguments"]))
    ):
        out.append(f"{what}: the gateway's call {calls[0]} differs from the engine's {engine}")
    if row is not None and row.get("tool_calls") != 1:
        out.append(f"{what}: the evidence row counts {row.get('tool_calls')!r} tool calls")
    return out


# -- cancellation and the model list -------------------------------------------------------------------------


_TERMINAL = (b"response.completed", b"response.incomplete", b"response.failed")


def _stream_then_close(env: CertifyEnv, prompt: str) -> tuple[bool, int, int]:
    """Open a Responses stream, read until the engine is seen running it, close mid-way.

    Returns (closed mid-way, engine requests seen running just before the close, bytes read). Real SGLang
    publishes its load snapshot every 15 decode steps, so the stream is read on until the request shows.
    """
    run = env.run
    body = {"model": run.wire_model, "input": prompt, "stream": True}
    busy, seen = 0, b""
    deadline = time.monotonic() + 60
    with httpx.stream("POST", run.base_url + "/responses", json=body, headers=run.headers(), timeout=60) as r:
        assert r.status_code == 200, r.read()[:300]
        chunks = r.iter_raw()  # keep a reference: a collected iterator closes the connection
        for chunk in chunks:
            seen += chunk
            if any(t in seen for t in _TERMINAL):
                break
            if b"response.output_text.delta" in seen:
                busy = engine_running(env)
                if busy >= 1 or time.monotonic() > deadline:
                    break
        mid_way = not any(t in seen for t in _TERMINAL)
    return mid_way, busy, len(seen)


@pytest.mark.exclusive_engine
@check("protocol.cancel.stream", description="a stream closed mid-way leaves no running request; the next request succeeds")
def test_cancel_stream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    fake = certify_env.fake
    if fake is not None:
        fake.faults("stall_mid_stream:t=20,after=6")  # hold the stream open so the close lands mid-way
    attempts: list[dict[str, Any]] = []
    try:
        # A random-weights model may stop early: a few prompts until one stream is closed while running.
        for prompt in ("Count to one thousand.", "List every prime below ten thousand.", "Repeat 'a' forever."):
            mid_way, busy, nbytes = _stream_then_close(certify_env, prompt)
            closed_at = time.monotonic()
            freed = wait_for(lambda: engine_running(certify_env) == 0, 10.0)
            freed_s = time.monotonic() - closed_at
            attempts.append({"closed_mid_way": mid_way, "busy_before_close": busy, "bytes": nbytes, "freed_s": round(freed_s, 3)})
            assert freed, f"the engine still runs {engine_running(certify_env)} request(s) 10 s after the client closed"
            if mid_way and busy >= 1:
                break
    finally:
        if fake is not None:
            fake.faults()
        certify_record.detail("attempts", attempts)
    last = attempts[-1]
    assert last["closed_mid_way"] and last["busy_before_close"] >= 1, "no stream was seen running before it was closed"
    certify_record.metric("protocol.cancel.freed_s", last["freed_s"])
    if fake is not None:
        assert fake.state()["leaked_slots"] == 0
    resp = _ok(gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": SMALL}))
    _check_response(resp, SMALL)


@check("protocol.models.wire_only", description="GET /v1/models lists only the run's wire model")
def test_models_wire_only(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    r = httpx.get(run.base_url + "/models", headers=run.headers(), timeout=30)
    body = _ok(r)
    assert body.get("object") == "list"
    ids = [m.get("id") for m in body.get("data", [])]
    assert ids == [run.wire_model], ids
    card = body["data"][0]
    assert card.get("root") in (None, run.wire_model), card
    assert "/" not in json.dumps(card.get("root") or ""), "the card leaks a path"
    # The engine may serve other names (LoRA adapters, its model path); the run sees only the wire model.
    r2 = httpx.get(run.base_url + "/models/" + run.wire_model, headers=run.headers(), timeout=30)
    assert r2.status_code == 404 and r2.json()["error"]["code"] == "inference_route_unavailable", r2.text[:300]
    certify_record.detail("wire_model", run.wire_model)
    certify_record.detail("card", card)


@check(
    "protocol.context.exact",
    engines=("sglang",),
    description="the gateway's context count equals the engine's prompt tokens for agent-shaped requests",
)
def test_context_count_is_the_engines(certify_env: CertifyEnv, certify_record: Any) -> None:
    """Developer messages, multi-part contents, history tool calls, tool schemas with HTML-special text,
    reasoning items, ``tool_choice: none``: for each, the prompt tokens the gateway counts (and refuses on)
    are the prompt tokens the engine reports for the body the gateway forwards."""
    from harness.daemon.core import load_sealed_lock
    from harness.store import model_files_dir

    env = certify_env
    lock = load_sealed_lock(env.root, env.run.inference_id)
    model_dir = model_files_dir(env.root, lock.model_id)
    counts = {
        case: prompt_counts(env.engine_url, env.engine_headers(), env.run.wire_model, model_dir, lock, case)
        for case in sorted(CASES)
    }
    certify_record.detail("prompt_tokens", {case: {"gateway": ours, "engine": theirs} for case, (ours, theirs) in counts.items()})
    wrong = {case: pair for case, pair in counts.items() if pair[0] != pair[1]}
    assert not wrong, f"(gateway, engine) prompt tokens differ: {wrong}"
