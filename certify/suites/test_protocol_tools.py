"""protocol: tool calls and empty output. A scripted fake engine returns a tool call or an empty answer; against
any engine a ``tools`` request and a ``function_call_output`` continuation are accepted and well-formed, and a
forced call (``tool_choice`` required or named) names the tool with arguments that validate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from certify.kit import answers
from certify.kit.answers import PROMPT, SMALL
from certify.kit.correctness import greedy_only
from certify.kit.requests import (
    CALL_BUDGET,
    FORCED_PROMPT,
    FORECAST_TOOL,
    OTHER_TOOL,
    arguments_problem,
    chat_stream_calls,
    evidence_row,
    gw_post,
    gw_stream,
)
from certify.kit.stack import scripted_stack
from certify.model_facts import not_applicable
from certify.registry import check
from certify.session import CertifyEnv
from gateway.sse import parse_events
from harness.app.locks import sealed_lock

# -- empty output and tool calls -----------------------------------------------------------------------------


@check(
    "protocol.output.empty",
    engines=("fake",),
    description="an empty model answer is a well-formed completed response",
    summary="an empty model answer is a well-formed completed response on both APIs",
)
def test_empty_output(certify_env: CertifyEnv, certify_record: Any, tmp_path: Path) -> None:
    with scripted_stack(certify_env, [{"text": ""}] * 4, tmp_path) as sg:
        run = sg.run
        resp = answers.ok_body(gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT}))
        answers.check_response(resp)
        assert resp["status"] == "completed" and answers.output_text(resp) == "", resp
        _, raw = gw_stream(run, "/responses", {"model": run.wire_model, "input": PROMPT, "stream": True})
        final = answers.check_responses_stream(parse_events(raw))
        assert final["status"] == "completed" and answers.output_text(final) == ""
        body = {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}]}
        chat = answers.ok_body(gw_post(run, "/chat/completions", body))
        choice = answers.check_chat(chat)
        assert choice["finish_reason"] == "stop" and not choice["message"].get("content"), choice
        _, raw = gw_stream(run, "/chat/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
        content, finish, usage = answers.check_chat_stream(raw)
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


@check(
    "protocol.tools.scripted",
    engines=("fake",),
    description="a scripted tool call comes back as function_call / tool_calls",
    summary=(
        "a scripted tool call came back as function_call / tool_calls (chat finish {chat_finish_reason}); "
        "the continuation {continuation_status}"
    ),
)
def test_tool_call_scripted(certify_env: CertifyEnv, certify_record: Any, tmp_path: Path) -> None:
    call: dict[str, Any] = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    turns = [call, {"text": "It is sunny."}, call, call]
    with scripted_stack(certify_env, turns, tmp_path) as sg:
        run = sg.run
        req = {"model": run.wire_model, "input": "Weather in Paris?", "tools": [_weather_tool()]}
        resp = answers.ok_body(gw_post(run, "/responses", req))
        answers.check_response(resp)
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
        answer = answers.ok_body(gw_post(run, "/responses", follow))
        answers.check_response(answer)
        assert answers.output_text(answer) == "It is sunny.", answer["output"]
        _, raw = gw_stream(run, "/responses", {**req, "stream": True})
        final = answers.check_responses_stream(parse_events(raw))
        assert [i["type"] for i in final["output"]].count("function_call") == 1, final["output"]
        kinds = {e.event for e in parse_events(raw)}
        assert "response.function_call_arguments.done" in kinds or "response.output_item.done" in kinds, kinds
        chat_req = {"model": run.wire_model, "messages": [{"role": "user", "content": "Weather?"}], "tools": [_chat_tool()]}
        chat = answers.ok_body(gw_post(run, "/chat/completions", chat_req))
        choice = answers.check_chat(chat)
        assert choice["finish_reason"] == "tool_calls", choice
        tc = choice["message"]["tool_calls"]
        assert len(tc) == 1 and tc[0]["function"]["name"] == "get_weather", tc
        assert json.loads(tc[0]["function"]["arguments"]) == {"city": "Paris"}
    certify_record.detail("responses_call", {k: fc[k] for k in ("name", "arguments")})
    certify_record.detail("continuation_status", answer["status"])
    certify_record.detail("chat_finish_reason", choice["finish_reason"])


@check(
    "protocol.tools.accepted",
    description="tools and a function_call_output continuation are accepted and well-formed",
    summary="tools and a function_call_output continuation were accepted and well-formed (input tokens {input_tokens})",
)
def test_tools_accepted(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    req = {"model": run.wire_model, "input": "Weather in Paris?", "tools": [_weather_tool()], "max_output_tokens": SMALL}
    resp = answers.ok_body(gw_post(run, "/responses", req))
    answers.check_response(resp, SMALL)
    follow = {
        **req,
        "input": [
            {"type": "message", "role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_certify0001", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_certify0001", "output": '{"sky": "sunny"}'},
        ],
    }
    answer = answers.ok_body(gw_post(run, "/responses", follow))
    answers.check_response(answer, SMALL)
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
    chat = answers.ok_body(gw_post(run, "/chat/completions", chat_req))
    answers.check_chat(chat, SMALL)
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
    summary=lambda d: (
        "forced tool calls (required and named) came back as structured calls with valid arguments in "
        f"{len(d['answers'])} variants"
    ),
)
def test_tools_forced(certify_env: CertifyEnv, certify_record: Any) -> None:
    """Real SGLang parses a forced call only with the lock's ``--tool-call-parser`` (without one, chat returns
    the call as message text); the fake answers a forced call the same way (the smallest valid arguments).
    Each answer through the gateway must hold exactly one structured call of the forced tool whose arguments
    validate against its schema; on a greedy lock the same request sent to the engine directly gives the same
    call, so the gateway relayed it unchanged (a lock that samples may answer two requests differently: the
    comparison is left out, saying why); the evidence row counts it."""
    run = certify_env.run
    lock = sealed_lock(certify_env.root, run.inference_id)
    assert lock.protocol.tool_calls and lock.protocol.tool_call_parser, (
        f"the lock claims no tool calls (parser {lock.protocol.tool_call_parser!r}): the model's chat template "
        "names no tool-call format; give one at `hitch models add --tool-call-parser`"
    )

    unrelayed = greedy_only(lock.generation, "two answers to one request may differ")

    def direct(path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        if unrelayed is not None:
            return None
        r = httpx.post(certify_env.engine_url + "/v1" + path, json=body, headers=certify_env.engine_headers(), timeout=600)
        return answers.ok_body(r)

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
            "temperature": lock.generation.temperature,  # the lock's: the direct engine request samples like the gateway's
            "max_tokens": CALL_BUDGET,
        }
        r = gw_post(run, "/chat/completions", chat_body)
        chat = answers.ok_body(r)
        message = answers.check_chat(chat)["message"]
        calls = _chat_calls(message)
        direct_chat = direct("/chat/completions", chat_body)
        engine = None if direct_chat is None else _chat_calls(direct_chat["choices"][0]["message"])
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
            "temperature": lock.generation.temperature,
            "max_output_tokens": CALL_BUDGET,
        }
        r = gw_post(run, "/responses", resp_body)
        resp = answers.ok_body(r)
        answers.check_response(resp)
        calls = _item_calls(resp["output"])
        direct_resp = direct("/responses", resp_body)
        engine = None if direct_resp is None else _item_calls(direct_resp["output"])
        row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
        seen[f"responses.{label}"] = {
            "calls": calls,
            "output_types": [i["type"] for i in resp["output"]],
            "finish": _response_finish(resp),
        }
        problems += _forced_problems(f"responses {label}", calls, engine, row)
        _, raw = gw_stream(run, "/responses", {**resp_body, "stream": True})
        final = answers.check_responses_stream(parse_events(raw))
        seen[f"responses.{label}.stream"] = {"calls": _item_calls(final["output"]), "finish": _response_finish(final)}
        problems += _forced_problems(f"responses {label} stream", _item_calls(final["output"]), engine, None)
    certify_record.detail("tool_call_parser", lock.protocol.tool_call_parser)
    if unrelayed is not None:
        certify_record.detail("engine_comparison", unrelayed)
    certify_record.detail("answers", seen)
    reason = not_applicable(certify_env.model_id, "closed_tool_call") if certify_env.engine == "sglang" else None
    if problems and reason is not None and all(a["finish"] == "length" for a in seen.values()):
        # every answer was cut by the budget (the model's doing, shown in "answers"); any answer that ended
        # otherwise without a valid call still fails the check
        certify_record.detail("not_applicable", reason)
        certify_record.detail("problems", problems)
        return
    assert not problems, problems


def _response_finish(resp: dict[str, Any]) -> str:
    """A Responses answer's end in chat's words: ``length`` when the output budget cut it."""
    details = resp.get("incomplete_details") or {}
    return (
        "length"
        if resp.get("status") == "incomplete" and details.get("reason") == "max_output_tokens"
        else str(resp.get("status"))
    )


def _forced_problems(
    what: str, calls: list[dict[str, str]], engine: list[dict[str, str]] | None, row: dict[str, Any] | None
) -> list[str]:
    """What is wrong with the calls of one answer: not exactly one structured call of the forced tool,
    arguments that do not validate, a call other than the engine's own answer (None: not compared, a lock that
    samples), an evidence row not counting it."""
    if len(calls) != 1 or calls[0]["name"] != "get_forecast":
        return [f"{what}: expected one structured get_forecast call, got {calls}"]
    problem = arguments_problem(calls[0]["arguments"])
    if problem:
        return [f"{what}: {problem}"]
    out = []
    if engine is not None and (
        len(engine) != 1
        or engine[0]["name"] != calls[0]["name"]
        or arguments_problem(engine[0]["arguments"])
        or (json.loads(engine[0]["arguments"]) != json.loads(calls[0]["arguments"]))
    ):
        out.append(f"{what}: the gateway's call {calls[0]} differs from the engine's {engine}")
    if row is not None and row.get("tool_calls") != 1:
        out.append(f"{what}: the evidence row counts {row.get('tool_calls')!r} tool calls")
    return out
