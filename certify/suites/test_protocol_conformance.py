"""protocol: the Open Responses public cases that apply to a text-only server, through the gateway.

``protocol.conformance.responses`` is our own implementation of the specification's public compliance cases
(basic, system prompt, assistant phase, streaming, multi-turn, tool calling, function-call round trip,
``previous_response_id``, image input, compaction), each answer validated against the reference schema
(:mod:`certify.open_responses`, a JSON-Schema 2020-12 validator) — every streaming event too, with its
``sequence_number`` strictly increasing. The details list each case: ``passed`` (the answer conforms),
``refused`` (a text-only, stateless server declines by design, and says so clearly: the OpenAI error shape,
a stable code, the right parameter), ``not_applicable`` (the forced call of a model fixture the catalog
declares unable to close one within a budget, cut by the budget: its answers still conform) or ``failed``
with what was wrong.

Tool calling uses a forced ``tool_choice`` (a named function): a small model may never call a tool on its own,
so an unforced case would measure the model, not the server. Real SGLang here may run a random-weights model:
the cases assert shape, never text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from certify.kit.answers import SMALL
from certify.kit.requests import CALL_BUDGET, FORCED_PROMPT, FORECAST_TOOL, TIMEOUT, arguments_problem, gw_post, gw_stream
from certify.model_facts import not_applicable
from certify.open_responses import SCHEMA_VERSION, resource_errors, schema, stream_errors
from certify.registry import check
from certify.session import CertifyEnv, RunHandle
from gateway.sse import parse_events

_TOOLS = [{"type": "function", **FORECAST_TOOL}]
_FORCED = {"type": "function", "name": FORECAST_TOOL["name"]}
_ERROR_FIELDS = ("message", "type", "param", "code")
Case = dict[str, Any]


def _ok(errors: list[str], **facts: Any) -> Case:
    return {"status": "passed", **facts} if not errors else {"status": "failed", "problems": errors[:8], **facts}


def _unary(run: RunHandle, body: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    r = gw_post(run, "/responses", {"model": run.wire_model, **body})
    if r.status_code != 200:
        return None, [f"HTTP {r.status_code}: {r.text[:300]}"]
    obj = r.json()
    return obj, resource_errors(obj)


def _streamed(run: RunHandle, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    r, raw = gw_stream(run, "/responses", {"model": run.wire_model, **body, "stream": True})
    if r.status_code != 200:
        return [], [f"HTTP {r.status_code}: {raw[:300]!r}"]
    events = [e.json() for e in parse_events(raw)]
    return events, stream_errors(events)


def _refusal(r: httpx.Response, status: int, code: str, param: str | None) -> list[str]:
    """A clear refusal: the status, OpenAI's error shape (every field, typed), our stable code, the parameter."""
    try:
        error = r.json().get("error")
    except ValueError:
        return [f"HTTP {r.status_code}, not JSON: {r.text[:200]}"]
    problems = [] if r.status_code == status else [f"HTTP {r.status_code}, expected {status}"]
    if not isinstance(error, dict) or any(k not in error for k in _ERROR_FIELDS):
        return [*problems, f"not OpenAI's error shape: {str(error)[:200]}"]
    if error["code"] != code:
        problems.append(f"code {error['code']!r}, expected {code!r}")
    if param is not None and error["param"] != param:
        problems.append(f"param {error['param']!r}, expected {param!r}")
    if not isinstance(error["message"], str) or not error["message"]:
        problems.append("no message")
    return problems


def _refused(r: httpx.Response, status: int, code: str, param: str | None, why: str) -> Case:
    problems = _refusal(r, status, code, param)
    if problems:
        return {"status": "failed", "problems": problems}
    return {"status": "refused", "http_status": r.status_code, "code": code, "why": why}


def _text(resource: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in resource.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
        if part.get("type") == "output_text"
    )


def _calls(resource: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in resource.get("output", []) if item.get("type") == "function_call"]


# -- the cases ---------------------------------------------------------------------------------------------


def case_basic(run: RunHandle, state: dict[str, Any]) -> Case:
    obj, errors = _unary(
        run, {"input": [{"type": "message", "role": "user", "content": "Say hello."}], "max_output_tokens": SMALL}
    )
    if obj is not None and not any(i.get("type") == "message" for i in obj.get("output", [])):
        errors.append("no message in the output")
    return _ok(errors, response_status=obj and obj.get("status"))


def case_system_prompt(run: RunHandle, state: dict[str, Any]) -> Case:
    body = {
        "instructions": "You answer in one word.",
        "input": [
            {"type": "message", "role": "system", "content": "Be brief."},
            {"type": "message", "role": "user", "content": "Name a colour."},
        ],
        "max_output_tokens": SMALL,
    }
    obj, errors = _unary(run, body)
    if obj is not None and obj.get("instructions") != body["instructions"]:
        errors.append(f"instructions echoed as {obj.get('instructions')!r}")
    return _ok(errors)


def case_assistant_phase(run: RunHandle, state: dict[str, Any]) -> Case:
    """An assistant message with its ``phase`` in the history; the answer's message phase (if any) is the
    schema's (``commentary`` / ``final_answer``)."""
    body = {
        "input": [
            {"type": "message", "role": "user", "content": "Count to two."},
            {"type": "message", "role": "assistant", "phase": "final_answer",
             "content": [{"type": "output_text", "text": "One, two.", "annotations": []}]},
            {"type": "message", "role": "user", "content": "Now to three."},
        ],
        "max_output_tokens": SMALL,
    }  # fmt: skip
    obj, errors = _unary(run, body)
    phases = [i.get("phase") for i in (obj or {}).get("output", []) if i.get("type") == "message"]
    return _ok(errors, output_phases=phases)


def case_streaming(run: RunHandle, state: dict[str, Any]) -> Case:
    events, errors = _streamed(run, {"input": "Say hello.", "max_output_tokens": SMALL})
    deltas = "".join(e.get("delta", "") for e in events if e.get("type") == "response.output_text.delta")
    done = [e.get("text") for e in events if e.get("type") == "response.output_text.done"]
    if done and done[-1] != deltas:
        errors.append("output_text.done differs from the deltas")
    if events and isinstance(events[-1].get("response"), dict) and _text(events[-1]["response"]) != deltas:
        errors.append("the terminal response's text differs from the deltas")
    return _ok(errors, events=len(events), types=sorted({str(e.get("type")) for e in events}))


def case_multi_turn(run: RunHandle, state: dict[str, Any]) -> Case:
    body = {
        "input": [
            {"type": "message", "role": "user", "content": "My name is Ada."},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello Ada.", "annotations": []}],
            },
            {"type": "message", "role": "user", "content": "What is my name?"},
        ],
        "max_output_tokens": SMALL,
    }
    obj, errors = _unary(run, body)
    usage = (obj or {}).get("usage")
    return _ok(errors, input_tokens=usage.get("input_tokens") if isinstance(usage, dict) else None)


def _finish(resource: dict[str, Any]) -> str:
    details = resource.get("incomplete_details") or {}
    cut = resource.get("status") == "incomplete" and details.get("reason") == "max_output_tokens"
    return "length" if cut else str(resource.get("status"))


def _call_problem(resource: dict[str, Any]) -> str | None:
    """Why an answer to the forced tool choice is not one valid call of the forced tool (None: it is)."""
    calls = _calls(resource)
    if len(calls) != 1 or calls[0].get("name") != FORECAST_TOOL["name"]:
        output = [i.get("type") for i in resource.get("output", [])]
        return f"expected one {FORECAST_TOOL['name']} call, got {len(calls)} (output {output}, text {_text(resource)[:120]!r})"
    return arguments_problem(calls[0].get("arguments"))


def case_tool_calling(run: RunHandle, state: dict[str, Any]) -> Case:
    """A forced (named) ``tool_choice``, non-stream and stream: each answer conforms, and holds one call of the
    forced tool whose arguments validate. A model fixture the catalog declares unable to close a call within a
    budget (a random-weights checkpoint) may be cut by the budget instead: the answers must still conform."""
    body = {"input": FORCED_PROMPT, "tools": _TOOLS, "tool_choice": _FORCED, "max_output_tokens": CALL_BUDGET}
    obj, errors = _unary(run, body)
    events, stream_problems = _streamed(run, body)
    errors += [f"stream: {p}" for p in stream_problems]
    final = events[-1].get("response") if events else None
    answers = [a for a in (obj, final) if isinstance(a, dict)]
    if obj is not None and _call_problem(obj) is None:
        state["call"] = _calls(obj)[0]
    model = [f"{label}: {p}" for label, a in zip(("unary", "stream"), answers, strict=False) if (p := _call_problem(a))]
    facts = {
        "tool_choice": "forced (named): a small model may never call a tool on its own",
        "calls": [{"name": c.get("name"), "arguments": c.get("arguments")} for a in answers for c in _calls(a)],
        "finish": [_finish(a) for a in answers],
    }
    reason = state.get("closed_call_na")
    if not errors and model and reason and answers and all(_finish(a) == "length" for a in answers):
        return {"status": "not_applicable", "reason": reason, "problems": model, **facts}
    return _ok(errors + model, **facts)


def case_function_call_round_trip(run: RunHandle, state: dict[str, Any]) -> Case:
    """A history holding a call and its output answers a conforming response. The call is the tool calling
    case's own when it made one, else a well-formed call of the same tool (what the server does with a call's
    output does not depend on who made the call)."""
    call = state.get("call")
    source = "the tool calling case's answer"
    if call is None:
        call = {"type": "function_call", "call_id": "call_conformance_1", "name": FORECAST_TOOL["name"],
                "arguments": json.dumps({"city": "Paris", "unit": "celsius"})}  # fmt: skip
        source = "constructed (the model made no call)"
    body = {
        "input": [
            {"type": "message", "role": "user", "content": FORCED_PROMPT},
            {k: call[k] for k in ("type", "call_id", "name", "arguments")},
            {"type": "function_call_output", "call_id": call["call_id"], "output": json.dumps({"forecast": "sunny, 21 C"})},
        ],
        "tools": _TOOLS,
        "max_output_tokens": SMALL,
    }
    obj, errors = _unary(run, body)
    return _ok(errors, call=source, output_types=[i.get("type") for i in (obj or {}).get("output", [])])


def case_previous_response_id(run: RunHandle, state: dict[str, Any]) -> Case:
    first, errors = _unary(run, {"input": "Say hello.", "max_output_tokens": SMALL})
    if first is None:
        return _ok(errors)
    body = {"model": run.wire_model, "input": "And again.", "previous_response_id": first["id"], "max_output_tokens": SMALL}
    r = gw_post(run, "/responses", body)
    if r.status_code == 200:
        return _ok(resource_errors(r.json()), supported=True)
    why = "the gateway keeps no responses (it sends store=false): a client sends the whole history instead"
    return _refused(r, 400, "inference_parameter_conflict", "previous_response_id", why)


def case_image_input(run: RunHandle, state: dict[str, Any]) -> Case:
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    body = {
        "model": run.wire_model,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is this?"}, image]}],
    }
    r = gw_post(run, "/responses", body)
    return _refused(r, 400, "inference_modality_unsupported", "input[0].content[1].type", "a text-only server")


def case_compaction(run: RunHandle, state: dict[str, Any]) -> Case:
    body = {"model": run.wire_model, "input": [{"type": "message", "role": "user", "content": "Say hello."}]}
    r = httpx.post(run.base_url + "/responses/compact", json=body, headers=run.headers(), timeout=TIMEOUT)
    return _refused(r, 404, "inference_route_unsupported", None, "no compaction: the server keeps no state")


CASES: dict[str, Callable[[RunHandle, dict[str, Any]], Case]] = {
    "basic": case_basic,
    "system_prompt": case_system_prompt,
    "assistant_phase": case_assistant_phase,
    "streaming": case_streaming,
    "multi_turn": case_multi_turn,
    "tool_calling": case_tool_calling,
    "function_call_round_trip": case_function_call_round_trip,
    "previous_response_id": case_previous_response_id,
    "image_input": case_image_input,
    "compaction": case_compaction,
}


def _summary(details: Mapping[str, Any]) -> str:
    cases = details["cases"]
    passed = sorted(k for k, v in cases.items() if v["status"] == "passed")
    refused = sorted(k for k, v in cases.items() if v["status"] == "refused")
    na = sorted(k for k, v in cases.items() if v["status"] == "not_applicable")
    tail = f"; the model cannot show (its answers conform): {', '.join(na)}" if na else ""
    return (
        f"{len(passed)} of {len(cases)} Open Responses cases pass, validated against the schema ({details['schema']}); "
        f"refused clearly by design: {', '.join(refused) or 'none'}{tail}"
    )


@check(
    "protocol.conformance.responses",
    description="the Open Responses public cases that apply to a text-only server pass through the gateway, "
    "validated against the reference schema; image input, compaction and previous_response_id refused clearly",
    summary=_summary,
)
def test_responses_conformance(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    assert schema()["$defs"], "the reference schema did not load"
    na = not_applicable(certify_env.model_id, "closed_tool_call") if certify_env.engine == "sglang" else None
    state: dict[str, Any] = {"closed_call_na": na}
    cases: dict[str, Case] = {}
    for name, case in CASES.items():
        try:
            cases[name] = case(run, state)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            cases[name] = {"status": "failed", "problems": [f"{type(exc).__name__}: {str(exc)[:300]}"]}
    certify_record.detail("schema", SCHEMA_VERSION)
    certify_record.detail("cases", cases)
    certify_record.detail("passed", sorted(k for k, v in cases.items() if v["status"] == "passed"))
    certify_record.detail("refused", sorted(k for k, v in cases.items() if v["status"] == "refused"))
    certify_record.detail("model_cannot_show", sorted(k for k, v in cases.items() if v["status"] == "not_applicable"))
    counts = {
        status: sum(v["status"] == status for v in cases.values()) for status in ("passed", "refused", "not_applicable", "failed")
    }
    certify_record.metric("protocol.conformance.responses", {"cases": len(cases), **counts})
    failed = {k: v.get("problems") for k, v in cases.items() if v["status"] == "failed"}
    assert not failed, f"Open Responses cases failed: {json.dumps(failed)[:2000]}"
