"""What a well-formed Responses or chat answer is, as the protocol suites check it (non-stream and SSE).

Each ``check_*`` asserts the shape, the usage rules (:mod:`certify.kit.requests`) and, given a budget, that
the output stopped exactly at it (``incomplete`` / ``length``) or below it.
"""

from __future__ import annotations

from typing import Any

import httpx

from certify.kit.requests import chat_usage_problems, responses_usage_problems
from certify.session import CertifyEnv
from gateway.sse import SseEvent, parse_events
from harness.lock import load_sealed_lock

__all__ = [
    "PROMPT",
    "SMALL",
    "check_chat",
    "check_chat_stream",
    "check_response",
    "check_responses_stream",
    "lock_output_cap",
    "ok_body",
    "output_text",
]

PROMPT = "Say hello."
SMALL = 8  # an output budget small enough for every engine here


def lock_output_cap(env: CertifyEnv) -> int:
    return int(load_sealed_lock(env.root, env.run.inference_id).generation.max_output_tokens)


def ok_body(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, f"{r.status_code}: {r.text[:500]}"
    body = r.json()
    assert isinstance(body, dict)
    return body


def output_text(resp: dict[str, Any]) -> str:
    parts: list[str] = []
    for item in resp.get("output") or []:
        if item.get("type") == "message":
            for c in item.get("content") or []:
                if c.get("type") == "output_text":
                    parts.append(str(c.get("text", "")))
    return "".join(parts)


def check_response(resp: dict[str, Any], budget: int | None = None) -> None:
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


def check_chat(body: dict[str, Any], budget: int | None = None) -> dict[str, Any]:
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


def check_responses_stream(events: list[SseEvent], budget: int | None = None) -> dict[str, Any]:
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
    check_response(final, budget)
    deltas = "".join(e.json().get("delta", "") for e in events if e.event == "response.output_text.delta")
    assert deltas == output_text(final), "the deltas do not add up to the final output text"
    assert isinstance(final, dict)
    return final


def check_chat_stream(raw: bytes, budget: int | None = None) -> tuple[str, str, dict[str, Any]]:
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
