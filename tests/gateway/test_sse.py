"""The incremental SSE parser and the stream observer (unit tests, including random re-chunking)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway.sse import SseParser, StreamObserver, unary_outcome


def _chat_stream() -> bytes:
    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        obj = {
            "id": "abc123",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"

    usage = {"id": "abc123", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "reasoning_tokens": 1}}
    return b"".join(
        [
            b": heartbeat\n\n",
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "é漢🙂"}),
            chunk({"content": "x"}),
            chunk({}, "stop"),
            b"data: " + json.dumps(usage).encode() + b"\n\n",
            b"data: [DONE]\n\n",
        ]
    )


def test_parser_handles_several_events_per_read_and_crlf() -> None:
    p = SseParser()
    events = p.feed(b"event: a\r\ndata: 1\r\n\r\nevent: b\ndata: 2\ndata: 3\n\n: comment\n\n")
    assert events == [(b"a", b"1"), (b"b", b"2\n3")]
    assert p.tail() == b""


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60))
def test_any_chunking_gives_the_same_outcome(cuts: list[int]) -> None:
    raw = _chat_stream()
    obs = StreamObserver("chat")
    pos, t = 0, 0.0
    for n in cuts:
        if pos >= len(raw):
            break
        t += 1
        obs.feed(raw[pos : pos + n], t)
        pos += n
    obs.feed(raw[pos:], t + 1)
    out = obs.finish()
    assert (out.status, out.engine_rid, out.error_code) == ("completed", "abc123", None)
    assert out.usage is not None and (out.usage.input_tokens, out.usage.output_tokens, out.usage.reasoning_tokens) == (7, 3, 1)
    assert obs.first_text_at is not None


def test_ttft_is_the_first_text_not_the_role_chunk_or_a_heartbeat() -> None:
    raw = _chat_stream()
    events = raw.split(b"\n\n")
    obs = StreamObserver("chat")
    obs.feed(events[0] + b"\n\n", 1.0)  # heartbeat
    obs.feed(events[1] + b"\n\n", 2.0)  # role chunk
    assert obs.first_text_at is None
    obs.feed(b"\n\n".join(events[2:]), 3.0)
    assert obs.first_text_at == 3.0


def test_partial_event_missing_done_and_inband_error_are_failures() -> None:
    raw = _chat_stream()
    obs = StreamObserver("chat")
    obs.feed(raw[:-9], 1.0)  # ends in the middle of the [DONE] event
    assert obs.finish().status == "failed"
    obs = StreamObserver("chat")
    obs.feed(raw.replace(b"data: [DONE]\n\n", b""), 1.0)
    assert obs.finish().detail == "stream ended without its final event"
    obs = StreamObserver("chat")
    obs.feed(b'data: {"error": {"object": "error", "message": "boom", "code": 500}}\n\ndata: [DONE]\n\n', 1.0)
    assert obs.finish().status == "failed"


def test_responses_terminal_events() -> None:
    created = b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1"}}\n\n'
    delta = b'event: response.output_text.delta\ndata: {"delta":"hi","type":"response.output_text.delta"}\n\n'
    done = (
        b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_1","status":"completed",'
        b'"usage":{"input_tokens":4,"input_tokens_details":{"cached_tokens":2},"output_tokens":5,'
        b'"output_tokens_details":{"reasoning_tokens":3}}}}\n\n'
    )
    obs = StreamObserver("responses")
    obs.feed(created + delta, 1.0)
    obs.feed(done, 2.0)
    out = obs.finish()
    assert (out.status, out.engine_rid, obs.first_text_at) == ("completed", "resp_1", 1.0)
    assert out.usage is not None and (out.usage.cached_tokens, out.usage.output_tokens, out.usage.reasoning_tokens) == (2, 5, 3)
    obs = StreamObserver("responses")
    obs.feed(created + b'event: response.failed\ndata: {"type":"response.failed","response":{"id":"resp_1"}}\n\n', 1.0)
    assert obs.finish().status == "failed"


def test_unary_outcomes() -> None:
    assert unary_outcome("chat", 503, b'{"object":"error","message":"The request queue is full.","code":503}').status == "failed"
    ctx = b'{"object":"error","message":"The input (9 tokens) is longer than the model\'s context length (8 tokens)."}'
    assert unary_outcome("chat", 400, ctx).error_code == "inference_context_exceeded"
    ok = unary_outcome(
        "chat", 200, b'{"id":"r","choices":[{"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}'
    )
    assert (ok.status, ok.engine_rid) == ("incomplete", "r")


def _long_stream(ending: bytes) -> bytes:
    def text(i: int) -> bytes:
        return b'data: {"id":"r1","choices":[{"index":0,"delta":{"content":"t%d"},"finish_reason":null}]}\n\n' % i

    head = b'data: {"id":"r1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
    return head + b"".join(text(i) for i in range(30)) + ending


def _finish(reason: str) -> bytes:
    return b'data: {"id":"r1","choices":[{"index":0,"delta":{},"finish_reason":"%s"}]}\n\n' % reason.encode()


_ENDINGS = {
    "in-band error": (b'data: {"error":{"message":"boom"}}\n\ndata: [DONE]\n\n', "failed"),
    "abort": (_finish("abort") + b"data: [DONE]\n\n", "failed"),
    "length": (_finish("length") + b"data: [DONE]\n\n", "incomplete"),
    "no [DONE]": (_finish("stop"), "failed"),
}


@given(st.sampled_from(sorted(_ENDINGS)), st.lists(st.integers(min_value=1, max_value=400), max_size=30))
def test_the_quiet_phase_never_misses_the_ending(ending: str, cuts: list[int]) -> None:
    """Text events after the first are only scanned; whatever the chunking, the ending is still seen."""
    tail, status = _ENDINGS[ending]
    raw = _long_stream(tail)
    obs = StreamObserver("chat")
    pos = 0
    for n in cuts:
        obs.feed(raw[pos : pos + n], 1.0)
        pos += n
    obs.feed(raw[pos:], 2.0)
    out = obs.finish()
    assert (out.status, out.engine_rid) == (status, "r1")
    assert obs.first_text_at is not None
