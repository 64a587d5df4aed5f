"""Completing SGLang's Responses answers to the Open Responses schema (DESIGN §5; issue 48).

SGLang's ``/v1/responses`` leaves out fields the Open Responses schema requires of a ``ResponseResource``
(``completed_at``, the penalties, ``top_logprobs``, ``max_tool_calls``, ``background``, ``service_tier``,
``safety_identifier``, ``prompt_cache_key``) and writes ``null`` where the schema wants a value (an
``output_text`` part's ``logprobs``, the in-progress resource's ``text``, ``top_p``). Owns
:class:`ResponsesCompletion`, which fills those from facts the gateway owns:

- the sampling the lock pinned (the policy sent exactly these values: ``temperature``, ``top_p``; the
  penalties are pinned at 0), and the caller's own ``top_logprobs`` / ``text`` (defaults 0 and plain text);
- ``completed_at``: the gateway's clock when a completed or incomplete answer passed through (else null);
- what a local server does not offer: ``background: false``, ``service_tier: "default"``, and null
  ``max_tool_calls`` / ``safety_identifier`` / ``prompt_cache_key`` (no limit, identifier or cache key is
  applied);
- ``logprobs: []`` for an ``output_text`` part whose ``logprobs`` is null, unless the caller asked for logprobs
  (then the engine's null stays: the gateway never invents what the engine did not say).

Only missing fields are added and ``null``s the schema forbids are replaced by their value: nothing the engine
said is altered. The names of what was filled are kept (:attr:`ResponsesCompletion.filled`) for the evidence
row; capture keeps the engine's own bytes.

Streams: only events that carry a response, an item or a part are decoded and rewritten; every other event
(the text deltas above all) passes as the same bytes. A read that holds none of those events is returned as
is after a few substring scans; an event split across reads is held until its end arrived. A missing
``sequence_number`` is the previous one plus one. :meth:`ResponsesCompletion.failed_event` writes the
gateway's own terminal event (the gateway ends a stream) as a complete ``response.failed``.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.sse import TEXT_DELTAS
from harness.contracts.lock import InferenceLockV1

__all__ = ["LOGPROBS_INCLUDE", "ResponseFacts", "ResponsesCompletion", "response_facts"]

LOGPROBS_INCLUDE = "message.output_text.logprobs"
_RESOURCE_EVENTS = frozenset(
    {
        "response.created", "response.queued", "response.in_progress", "response.completed", "response.incomplete",
        "response.failed",
    }
)  # fmt: skip
_ITEM_EVENTS = frozenset({"response.output_item.added", "response.output_item.done"})
_PART_EVENTS = frozenset(
    {
        "response.content_part.added", "response.content_part.done", "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
    }
)  # fmt: skip
_EVENTS = _RESOURCE_EVENTS | _ITEM_EVENTS | _PART_EVENTS
# A read without any of these substrings holds none of the events above (scanned in C, a few per read).
_MARKERS = (
    b"response.created", b"response.queued", b"response.in_progress", b"response.completed", b"response.incomplete",
    b"response.failed", b"_item.", b"_part.",
)  # fmt: skip
# The head of a text delta event (JSON escapes newlines, so such an event holds no blank line before its end).
_DELTA_HEADS = tuple(b"event: " + name.encode() + b"\n" for name in sorted(TEXT_DELTAS))
_ENDED = frozenset({"completed", "incomplete"})
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_PLAIN_TEXT: dict[str, Any] = {"format": {"type": "text"}}


@dataclass(frozen=True)
class ResponseFacts:
    """What the gateway knows of one Responses request: the sampling it sent and what the caller asked."""

    temperature: float
    top_p: float
    top_logprobs: int = 0
    logprobs_asked: bool = False
    text: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(_PLAIN_TEXT))


def response_facts(body: dict[str, Any], lock: InferenceLockV1) -> ResponseFacts:
    """The facts of a Responses request the policy accepted (``body`` as the caller sent it)."""
    g = lock.generation
    top = body.get("top_logprobs")
    top_logprobs = top if isinstance(top, int) and not isinstance(top, bool) and top >= 0 else 0
    include = body.get("include")
    asked = top_logprobs > 0 or (isinstance(include, list) and LOGPROBS_INCLUDE in include)
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    chosen: dict[str, Any] = _PLAIN_TEXT
    if isinstance(text, dict) and isinstance(fmt, dict) and isinstance(fmt.get("type"), str):
        chosen = text
    return ResponseFacts(g.temperature, g.top_p, top_logprobs, asked, copy.deepcopy(chosen))


class ResponsesCompletion:
    """Completes one Responses answer: a unary body (:meth:`body`) or a stream (:meth:`feed`, :meth:`flush`)."""

    __slots__ = ("_changes", "_clock", "_facts", "_last_seq", "_off", "_passed", "_pending", "_resource", "filled", "relayed")

    def __init__(self, facts: ResponseFacts, clock: Any = time.time) -> None:
        self._facts = facts
        self._clock = clock
        self.filled: set[str] = set()  # the names of the fields the gateway added or filled
        self.relayed = False  # an answer of the engine went through (body or feed)
        self._pending = b""  # an event whose end has not arrived yet
        self._last_seq: int | None = None  # the last sequence_number decoded
        self._passed = 0  # events passed undecoded since then
        self._resource: dict[str, Any] | None = None  # the last completed resource (for failed_event)
        self._changes = 0  # fields added or filled so far (an event with none keeps its bytes)
        self._off = False  # the stream uses a framing this module does not rewrite (``\r``): passed as is

    # -- objects --

    def _fill(self, obj: dict[str, Any], name: str, value: Any, *, replace_null: bool = False) -> None:
        if name not in obj or (replace_null and obj[name] is None):
            obj[name] = value
            self.filled.add(name)
            self._changes += 1

    def _part(self, part: Any) -> None:
        if not isinstance(part, dict) or part.get("type") != "output_text":
            return
        self._fill(part, "annotations", [], replace_null=True)
        if not self._facts.logprobs_asked:
            self._fill(part, "logprobs", [], replace_null=True)

    def _item(self, item: Any) -> None:
        if not isinstance(item, dict):
            return
        content = item.get("content")
        if isinstance(content, list):
            for part in content:
                self._part(part)

    def _tool(self, tool: Any) -> None:
        if isinstance(tool, dict) and tool.get("type", "function") == "function":
            for name in ("description", "parameters", "strict"):
                self._fill(tool, name, None)

    def resource(self, r: dict[str, Any]) -> None:
        """Complete a ``ResponseResource`` in place."""
        f = self._facts
        ended = r.get("status") in _ENDED
        self._fill(r, "completed_at", int(self._clock()) if ended else None, replace_null=ended)
        for name in ("incomplete_details", "previous_response_id", "instructions", "error", "reasoning", "usage"):
            self._fill(r, name, None)
        self._fill(r, "max_output_tokens", None)
        self._fill(r, "temperature", f.temperature, replace_null=True)
        self._fill(r, "top_p", f.top_p, replace_null=True)
        self._fill(r, "presence_penalty", 0.0, replace_null=True)  # the policy pins both at 0
        self._fill(r, "frequency_penalty", 0.0, replace_null=True)
        self._fill(r, "top_logprobs", f.top_logprobs, replace_null=True)
        self._fill(r, "text", copy.deepcopy(f.text), replace_null=True)
        self._fill(r, "max_tool_calls", None)
        self._fill(r, "background", False, replace_null=True)
        self._fill(r, "service_tier", "default", replace_null=True)
        self._fill(r, "safety_identifier", None)
        self._fill(r, "prompt_cache_key", None)
        output = r.get("output")
        if isinstance(output, list):
            for item in output:
                self._item(item)
        tools = r.get("tools")
        if isinstance(tools, list):
            for tool in tools:
                self._tool(tool)
        self._resource = r

    def event(self, etype: str, obj: dict[str, Any]) -> None:
        """Complete one streaming event's object in place (its sequence number included)."""
        if etype in _RESOURCE_EVENTS:
            if isinstance(obj.get("response"), dict):
                self.resource(obj["response"])
        elif etype in _ITEM_EVENTS:
            self._item(obj.get("item"))
        elif etype in _PART_EVENTS:
            self._part(obj.get("part"))
        seq = obj.get("sequence_number")
        if not isinstance(seq, int) or isinstance(seq, bool):
            obj["sequence_number"] = self._next_seq()
            self.filled.add("sequence_number")
            self._changes += 1
        self._last_seq, self._passed = obj["sequence_number"], 0

    def _next_seq(self) -> int:
        return (-1 if self._last_seq is None else self._last_seq) + self._passed + 1

    def body(self, data: bytes) -> bytes:
        """A unary answer: the completed resource, or ``data`` itself when it is not a response object."""
        self.relayed = True
        try:
            obj = json.loads(data)
        except ValueError:
            return data
        if not isinstance(obj, dict) or obj.get("object") != "response":
            return data
        before = self._changes
        self.resource(obj)
        return _ENCODE(obj).encode() if self._changes != before else data

    # -- streams --

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to relay for one engine read (possibly empty: an event's end has not arrived)."""
        self.relayed = True
        if self._off:
            return chunk
        if not self._pending and chunk.startswith(_DELTA_HEADS) and chunk.find(b"\n\n") == len(chunk) - 2:
            self._passed += 1  # one whole text delta (SGLang writes one event per write): the hot path
            return chunk
        if not self._pending and chunk.endswith(b"\n\n") and not any(m in chunk for m in _MARKERS) and b"\r" not in chunk:
            self._passed += chunk.count(b"\n\n")
            return chunk
        data = self._pending + chunk if self._pending else chunk
        if b"\r" in data:  # CRLF framing: SGLang never sends it; relayed untouched rather than half-parsed
            self._off, self._pending = True, b""
            return data
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._pending = data
            return b""
        self._pending = data[cut + 2 :]
        return self._events(data[: cut + 2])

    def flush(self) -> bytes:
        """What was held when the engine's body ended (a partial event: relayed as the engine sent it)."""
        tail, self._pending = self._pending, b""
        return tail

    def _events(self, block: bytes) -> bytes:
        out: list[bytes] = []
        start = 0
        changed = False
        while start < len(block):
            end = block.find(b"\n\n", start) + 2
            one = block[start:end]
            start = end
            new = self._rewrite(one) if any(m in one for m in _MARKERS) else None
            if new is None:
                self._passed += 1
                out.append(one)
            else:
                changed = True
                out.append(new)
        return b"".join(out) if changed else block

    def _rewrite(self, one: bytes) -> bytes | None:
        """One event (``event:``/``data:`` lines and its blank line) completed, or None to pass it as is."""
        lines = one[:-2].split(b"\n")
        name = next((ln[6:].strip().decode("utf-8", "replace") for ln in lines if ln.startswith(b"event:")), None)
        data = b"\n".join(ln[5:].removeprefix(b" ") for ln in lines if ln.startswith(b"data:"))
        if name is not None and name not in _EVENTS:
            return None
        try:
            obj = json.loads(data)
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        etype = name if name is not None else obj.get("type")
        if etype not in _EVENTS:
            return None
        assert isinstance(etype, str)
        before = self._changes
        self.event(etype, obj)
        if self._changes == before:
            return None  # complete as the engine sent it: its own bytes
        kept = [ln for ln in lines if not ln.startswith(b"data:")]
        return b"\n".join([*kept, b"data: " + _ENCODE(obj).encode()]) + b"\n\n"

    def failed_event(self, code: str, message: str, response_id: str | None) -> bytes:
        """The gateway's own ``response.failed`` (it ends a stream): the last resource the engine sent, completed,
        with status failed and the error; a sequence number after the last event relayed."""
        base: dict[str, Any] = {"id": response_id, "object": "response"}
        if self._resource is not None:
            base = copy.deepcopy(self._resource)
        if base.get("id") is None:
            base["id"] = response_id
        base["status"] = "failed"
        base["error"] = {"code": code, "message": message}
        base["completed_at"] = None
        self.resource(base)
        seq = self._next_seq()
        self._last_seq, self._passed = seq, 0
        data = _ENCODE({"type": "response.failed", "response": base, "sequence_number": seq})
        return b"event: response.failed\ndata: " + data.encode() + b"\n\n"
