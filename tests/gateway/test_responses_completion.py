"""The Responses completion on its own (no engine): what it fills, what it leaves, how it reads a stream."""

from __future__ import annotations

import json
from typing import Any

from certify.open_responses import resource_errors, stream_errors
from gateway.responses_completion import ResponseFacts, ResponsesCompletion, response_facts
from tests.gateway.support import make_lock

_RESOURCE = {
    "id": "resp_1", "object": "response", "created_at": 100, "model": "m", "output": [], "status": "in_progress",
    "usage": None, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
    "incomplete_details": None, "instructions": None, "max_output_tokens": 8, "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": 0.0, "text": None, "top_p": None,
    "truncation": "disabled", "user": None, "metadata": {},
}  # fmt: skip
_PART = {"annotations": [], "text": "", "type": "output_text", "logprobs": None}


def _frame(etype: str, obj: dict[str, Any]) -> bytes:
    return f"event: {etype}\ndata: ".encode() + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _stream() -> list[bytes]:
    message = {"id": "m1", "type": "message", "role": "assistant", "status": "completed", "content": [{**_PART, "text": "hi"}]}
    usage = {
        "input_tokens": 1, "output_tokens": 1, "total_tokens": 2, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }  # fmt: skip
    done = {**_RESOURCE, "status": "completed", "output": [message], "usage": usage}
    where = {"item_id": "m1", "output_index": 0, "content_index": 0}
    return [
        _frame("response.created", {"type": "response.created", "response": _RESOURCE, "sequence_number": 0}),
        _frame(
            "response.content_part.added", {"type": "response.content_part.added", "part": _PART, **where, "sequence_number": 1}
        ),
        _frame(
            "response.output_text.delta",
            {"type": "response.output_text.delta", "delta": "hi", **where, "logprobs": [], "sequence_number": 2},
        ),
        _frame("response.completed", {"type": "response.completed", "response": done, "sequence_number": 3}),
    ]


def _facts(**kw: Any) -> ResponseFacts:
    return ResponseFacts(temperature=0.0, top_p=0.9, **kw)


def _parse(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(b.split(b"data: ", 1)[1]) for b in raw.split(b"\n\n") if b.strip()]


def test_each_event_split_anywhere_comes_out_complete_and_deltas_unchanged() -> None:
    whole = b"".join(_stream())
    for cut in range(1, len(whole), 37):
        c = ResponsesCompletion(_facts(), clock=lambda: 123.9)
        out = c.feed(whole[:cut]) + c.feed(whole[cut:]) + c.flush()
        events = _parse(out)
        assert stream_errors(events) == [], cut
        assert _stream()[2] in out  # the text delta: the engine's bytes
        assert events[-1]["response"]["completed_at"] == 123 and events[-1]["response"]["top_p"] == 0.9
        assert events[0]["response"]["completed_at"] is None


def test_a_read_without_those_events_is_returned_as_is_and_a_partial_tail_is_flushed_unchanged() -> None:
    c = ResponsesCompletion(_facts())
    delta = _stream()[2]
    assert c.feed(delta) is delta
    assert c.feed(b"event: response.completed\ndata: {") == b""
    assert c.flush() == b"event: response.completed\ndata: {"  # a partial event at close: as the engine sent it


def test_a_missing_sequence_number_follows_the_last_and_the_gateways_failed_event_is_next() -> None:
    c = ResponsesCompletion(_facts())
    created = {"type": "response.created", "response": _RESOURCE}
    first = _frame("response.created", {**created, "sequence_number": 4})
    out = c.feed(first + _stream()[2] + _frame("response.in_progress", created))
    assert [e["sequence_number"] for e in _parse(out)] == [4, 2, 6]  # the engine's numbers are never changed
    failed = _parse(c.failed_event("inference_stream_idle_timeout", "quiet", "resp_1"))[0]
    assert failed["sequence_number"] == 7 and failed["response"]["status"] == "failed"
    assert resource_errors(failed["response"]) == []


def test_logprobs_asked_for_keep_the_engines_null_and_the_callers_choices_are_echoed() -> None:
    facts = response_facts({"include": ["message.output_text.logprobs"], "top_logprobs": 2}, make_lock())
    assert (facts.logprobs_asked, facts.top_logprobs) == (True, 2)
    c = ResponsesCompletion(facts)
    body = {**_RESOURCE, "status": "completed", "output": [{"id": "m", "type": "message", "role": "assistant",
            "status": "completed", "content": [dict(_PART)]}]}  # fmt: skip
    done = json.loads(c.body(json.dumps(body).encode()))
    assert done["output"][0]["content"][0]["logprobs"] is None and done["top_logprobs"] == 2
    plain = response_facts({"text": {"format": {"type": "json_object"}}}, make_lock())
    assert plain.text == {"format": {"type": "json_object"}} and not plain.logprobs_asked


def test_an_error_body_or_crlf_framing_is_relayed_untouched() -> None:
    c = ResponsesCompletion(_facts())
    error = b'{"error":{"message":"x","type":"invalid_request_error","param":null,"code":400}}'
    assert c.body(error) is error and c.filled == set()
    crlf = _stream()[0].replace(b"\n", b"\r\n")
    assert c.feed(crlf) == crlf and c.feed(_stream()[0]) == _stream()[0]


def test_only_clean_responses_subroutes_are_named_unsupported() -> None:
    from gateway.routes import match_route, unsupported_route

    p = "/runs/abc123/v1/responses"
    assert unsupported_route("POST", p + "/compact") is not None and "compaction" in str(
        unsupported_route("POST", p + "/compact")
    )
    assert unsupported_route("GET", p + "/resp_1/input_items") is not None
    for trick in ("/", "/./x", "/../models", "/a//b", "/x?y=1", "/%63ompact"):
        assert unsupported_route("POST", p + trick) is None, trick  # a path trick stays "no such route"
    assert unsupported_route("POST", p) is None and match_route("POST", p) is not None
    assert unsupported_route("POST", "/v1/responses/compact") is None  # not under a run
