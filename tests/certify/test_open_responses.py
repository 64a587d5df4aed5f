"""The Open Responses validator the conformance check uses: it finds what the schema forbids."""

from __future__ import annotations

from typing import Any

from certify.open_responses import event_errors, resource_errors, schema, stream_errors


def _event(etype: str, seq: int, **extra: Any) -> dict[str, Any]:
    return {"type": etype, "sequence_number": seq, **extra}


def _delta(seq: int) -> dict[str, Any]:
    return _event("response.output_text.delta", seq, item_id="m", output_index=0, content_index=0, delta="a")


def test_the_schema_is_the_reference_release_and_has_every_stream_event_type() -> None:
    s = schema()
    assert s["x-source"]["spec_version"] == "2026-04-24"
    assert all(name in s["$defs"] for name in s["x-stream-event-types"].values())


def test_an_answer_as_sglang_sends_it_does_not_conform() -> None:
    sglang_like = {
        "id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "completed", "output": [
            {"id": "msg", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": None}]}
        ],
        "usage": None, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
        "incomplete_details": None, "instructions": None, "max_output_tokens": 8, "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": 0.0, "text": None,
        "top_p": None, "truncation": "disabled",
    }  # fmt: skip
    problems = "\n".join(resource_errors(sglang_like))
    for missing in ("completed_at", "background", "service_tier", "presence_penalty", "top_logprobs"):
        assert missing in problems
    assert "response.text" in problems and "response.top_p" in problems


def test_a_stream_out_of_order_or_without_its_end_is_reported() -> None:
    assert any("sequence_number 1 after 2" in p for p in stream_errors([_delta(2), _delta(1)]))
    assert "the stream does not end with a terminal event" in stream_errors([_delta(0)])
    assert event_errors({"type": "response.nonsense"}) == ["event: unknown event type 'response.nonsense'"]
    assert any("sequence_number" in p for p in event_errors({"type": "response.output_text.delta", "delta": "a"}))
