"""Incremental SSE parsing and what a stream says about its own outcome (reference §4.1, §4.4).

Reads events with the one SSE reader, ``harness.sse`` (its :class:`SseParser`, ``SseEvent`` and
``parse_events`` are re-exported here: events split across reads, several events per read, ``\\r\\n``
framing; an unterminated tail at close is reported as a partial event), and owns :class:`StreamObserver`,
which watches a chat or Responses stream on the side of the byte pass-through:

- TTFT is the first event carrying text: a chat ``delta.content`` / ``reasoning_content`` / ``tool_calls``
  or a Responses ``*.delta`` event with a non-empty delta; never the role chunk, headers or a heartbeat.
- the engine request id (chat ``id``; Responses ``response.id``), usage (reasoning tokens are a subset of
  output tokens and are never added), and the terminal state: chat ends with ``data: [DONE]``; Responses
  ends with ``response.completed`` / ``response.incomplete`` / ``response.failed``. An in-band error,
  ``response.failed``, a partial event or an end without the terminal event is a failure even after 200.
- the tool calls the answer holds (evidence): chat, the calls a ``delta.tool_calls`` entry opens (the one
  with the call's ``id``); Responses, the ``function_call`` items of the terminal response.

Per-event cost is kept low: JSON is decoded only for events that can change the outcome (the first
events until text arrives, errors, finish and usage chunks, Responses lifecycle events).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from harness.sse import SseEvent, SseParser, parse_events

__all__ = [
    "TEXT_DELTAS",
    "Outcome",
    "SseEvent",
    "SseParser",
    "StreamObserver",
    "Usage",
    "function_calls",
    "parse_events",
    "unary_outcome",
    "usage_from",
]

Api = Literal["chat", "responses"]
TEXT_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.refusal.delta",
    }
)
_CHAT_MARKERS = (b'"finish_reason":"', b'"usage"', b"[DONE]", b'"error"', b'"finish_reason": "', b'"tool_calls"')
_RESPONSES_MARKERS = (b"response.completed", b"response.incomplete", b"response.failed", b"event: error", b'"type":"error"')
_TERMINAL = {"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}


@dataclass
class Usage:
    input_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_from(obj: Any) -> Usage | None:
    """Chat or Responses usage (either shape) -> Usage; reasoning is reported, never added to output."""
    if not isinstance(obj, dict):
        return None
    u = Usage()
    u.input_tokens = _int(obj.get("input_tokens", obj.get("prompt_tokens")))
    u.output_tokens = _int(obj.get("output_tokens", obj.get("completion_tokens")))
    details = obj.get("input_tokens_details") or obj.get("prompt_tokens_details") or {}
    if isinstance(details, dict):
        u.cached_tokens = _int(details.get("cached_tokens"))
    out_details = obj.get("output_tokens_details") or obj.get("completion_tokens_details") or {}
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, dict) else None
    u.reasoning_tokens = _int(reasoning if reasoning is not None else obj.get("reasoning_tokens"))
    return u


@dataclass
class Outcome:
    """What the engine's answer says happened."""

    status: Literal["completed", "incomplete", "failed"]
    engine_rid: str | None
    usage: Usage | None
    error_code: str | None
    detail: str | None = None
    tool_calls: int | None = None


class StreamObserver:
    """Watches one SSE stream; :meth:`feed` per upstream read, :meth:`finish` at the end."""

    __slots__ = (
        "_api", "_call_ids", "_markers", "_parser", "_tail", "done", "engine_rid", "error", "first_text_at", "status",
        "tool_calls", "usage",
    )  # fmt: skip

    def __init__(self, api: Api) -> None:
        self._api = api
        self._parser = SseParser()
        self.first_text_at: float | None = None
        self.engine_rid: str | None = None
        self.usage: Usage | None = None
        self.status: str | None = None  # completed | incomplete | failed once known
        self.error: str | None = None
        self.done = False
        self.tool_calls: int | None = None  # Responses: from the terminal response
        self._call_ids: set[str] = set()  # chat: the ids of the calls the deltas opened
        self._markers = _CHAT_MARKERS if api == "chat" else _RESPONSES_MARKERS
        self._tail = b""  # fast path: the unterminated tail after the last blank line

    def feed(self, chunk: bytes, now: float) -> None:
        if self.first_text_at is not None and self.engine_rid is not None and not self._parser.tail() and b"\r" not in chunk:
            # Quiet phase: only events that can change the outcome are decoded; the rest is scanned in C
            # (one rfind and a few finds per read).
            data = self._tail + chunk if self._tail else chunk
            cut = data.rfind(b"\n\n") + 2
            if cut < 2:
                self._tail = data
                return
            first = cut
            for marker in self._markers:  # bytes.find: a fast C scan (a regex alternation is ~5x slower)
                at = data.find(marker, 0, first)
                if at >= 0:
                    first = at
            if first == cut:
                self._tail = data[cut:]
                return
            self._tail = b""
            # Events before the first marked one carry nothing the outcome needs: parse from that event on.
            start = data.rfind(b"\n\n", 0, first)
            self._dispatch(data[start + 2 if start >= 0 else 0 : cut], now)
            self._parser.feed(data[cut:])
            return
        if self._tail:
            chunk, self._tail = self._tail + chunk, b""
        if b"\r" in chunk:
            self._dispatch(chunk, now)
            return
        # Event by event until the stream turns quiet, then the rest of this read takes the quiet path.
        start = 0
        while True:
            cut = chunk.find(b"\n\n", start)
            if cut < 0:
                if start < len(chunk):
                    self._dispatch(chunk[start:] if start else chunk, now)  # the parser keeps the partial event
                return
            self._dispatch(chunk[start : cut + 2], now)
            start = cut + 2
            if self.first_text_at is not None and self.engine_rid is not None and not self._parser.tail():
                if start < len(chunk):
                    self.feed(chunk[start:], now)
                return

    def _dispatch(self, chunk: bytes, now: float) -> None:
        for name, data in self._parser.feed(chunk):
            if self._api == "chat":
                self._chat(data, now)
            else:
                self._responses(name, data, now)

    def _event_object(self, data: bytes) -> dict[str, Any] | None:
        """The event's JSON object (None for another JSON value); an undecodable event fails the stream."""
        try:
            obj = json.loads(data)
        except ValueError:
            self.status, self.error = "failed", "undecodable event"
            return None
        return obj if isinstance(obj, dict) else None

    def _chat(self, data: bytes, now: float) -> None:
        if self.done:
            return
        if data == b"[DONE]":
            self.done = True
            return
        if data.startswith(b'{"error"'):
            self.status = "failed"
            self.error = "in-band error"
            return
        if (
            self.first_text_at is not None
            and self.engine_rid is not None
            and b'"usage":{' not in data
            and b'"usage": {' not in data
            and b'"finish_reason":"' not in data
            and b'"finish_reason": "' not in data
            and b'"tool_calls"' not in data
        ):
            return
        obj = self._event_object(data)
        if obj is None:
            return
        if "error" in obj:
            self.status, self.error = "failed", "in-band error"
            return
        if self.engine_rid is None and isinstance(obj.get("id"), str):
            self.engine_rid = obj["id"]
        usage = obj.get("usage")
        if usage:
            self.usage = usage_from(usage)
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            if self.first_text_at is None and (delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")):
                self.first_text_at = now
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"]:
                    self._call_ids.add(call["id"])
            finish = choice.get("finish_reason")
            if finish is not None and self.status != "failed":
                self.status = "incomplete" if finish == "length" else "failed" if finish == "abort" else "completed"
                if finish == "abort":
                    self.error = "engine aborted the request"

    def _responses(self, name: bytes | None, data: bytes, now: float) -> None:
        etype = name.decode("utf-8", "replace") if name is not None else None
        if etype is None or etype in _TERMINAL or etype in ("response.created", "error"):
            obj = self._event_object(data)
            if obj is None:
                return
            etype = etype or obj.get("type")
            response = obj.get("response")
            if isinstance(response, dict):
                if self.engine_rid is None and isinstance(response.get("id"), str):
                    self.engine_rid = response["id"]
                if response.get("usage"):
                    self.usage = usage_from(response["usage"])
                if etype in _TERMINAL:
                    self.tool_calls = function_calls(response)
            if etype == "error":
                self.status, self.error = "failed", "in-band error"
            elif etype in _TERMINAL:
                self.done = True
                if self.status != "failed":
                    self.status = _TERMINAL[etype]
                if etype == "response.failed":
                    self.error = "response.failed"
            if self.first_text_at is None and etype in TEXT_DELTAS and obj.get("delta"):
                self.first_text_at = now
            return
        if self.first_text_at is None and etype in TEXT_DELTAS and b'"delta":""' not in data:
            self.first_text_at = now

    def finish(self) -> Outcome:
        """The stream's outcome once the upstream body ended (cleanly or not)."""
        if self._parser.tail().strip() or self._tail.strip():
            return Outcome("failed", self.engine_rid, self.usage, "inference_upstream_failed", "partial event at close")
        if not self.done and self.status != "failed":
            return Outcome(
                "failed", self.engine_rid, self.usage, "inference_upstream_failed", "stream ended without its final event"
            )
        return self.terminal_outcome()

    def terminal_outcome(self) -> Outcome:
        """The outcome the stream's events stated, whatever came after them.

        Used as is when the client went away after the terminal event (``[DONE]``, ``response.completed``…) had
        been relayed: the exchange ended as the engine said, it was not cancelled."""
        calls = len(self._call_ids) if self._api == "chat" else self.tool_calls
        if self.status == "failed":
            return Outcome("failed", self.engine_rid, self.usage, "inference_upstream_failed", self.error, calls)
        status: Literal["completed", "incomplete"] = "incomplete" if self.status == "incomplete" else "completed"
        return Outcome(status, self.engine_rid, self.usage, None, tool_calls=calls)


def function_calls(response: dict[str, Any]) -> int:
    """The ``function_call`` items of a Responses response object."""
    output = response.get("output")
    if not isinstance(output, list):
        return 0
    return sum(1 for item in output if isinstance(item, dict) and item.get("type") == "function_call")


def unary_outcome(api: Api, http_status: int, body: bytes) -> Outcome:
    """The outcome of a non-streamed answer (one JSON body)."""
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return Outcome("failed", None, None, "inference_upstream_failed", "undecodable body")
    rid = obj.get("id") if isinstance(obj.get("id"), str) else None
    if http_status >= 400 or obj.get("error") or obj.get("object") == "error":
        err = obj.get("error")
        message = str((err.get("message") if isinstance(err, dict) else None) or obj.get("message") or "")
        code = "inference_context_exceeded" if "context length" in message else "inference_upstream_failed"
        return Outcome("failed", rid, None, code, message[:200])
    usage = usage_from(obj.get("usage"))
    if api == "responses":
        status = obj.get("status")
        calls = function_calls(obj)
        if status == "failed":
            return Outcome("failed", rid, usage, "inference_upstream_failed", "status failed", calls)
        return Outcome("incomplete" if status == "incomplete" else "completed", rid, usage, None, tool_calls=calls)
    finish = None
    calls = 0
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        finish = choices[0].get("finish_reason")
        answer = choices[0].get("message")
        listed = answer.get("tool_calls") if isinstance(answer, dict) else None
        calls = len(listed) if isinstance(listed, list) else 0
    if finish == "abort":
        return Outcome("failed", rid, usage, "inference_upstream_failed", "engine aborted the request", calls)
    return Outcome("incomplete" if finish == "length" else "completed", rid, usage, None, tool_calls=calls)
