"""What a benchmark client reads off a streamed answer: the one definition of TTFT and ITL.

**TTFT** (time to first token) is, from the moment the client starts sending the request, the arrival of
the first complete SSE event that carries output text: a chat ``choices[].delta`` with a non-empty
``content``, ``reasoning_content`` or ``tool_calls``; a Responses ``*.delta`` text event (the set
:data:`gateway.sse.TEXT_DELTAS`) with a non-empty ``delta``. The role chunk, headers, heartbeats and empty
deltas are not tokens. The gateway's evidence (``ttft_ms``) applies the same rule on its side of the wire
(:class:`gateway.sse.StreamObserver`); the signed ``ttft_added_ms`` and ``hitch bench overhead`` read it here.

**ITL** (inter-token latency) of one request is the mean gap between its first and its last text event,
``(t_last - t_first) / (n - 1)`` over ``n >= 2`` text events; one figure per request, so the percentiles
of ITL are percentiles over requests. **E2E** runs from sending to the end of the body.

Events are cut by the one SSE parser (:class:`gateway.sse.SseParser`); arrival times are the client's
``time.perf_counter`` when the read that completed the event returned.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from gateway.sse import TEXT_DELTAS, SseParser

__all__ = ["StreamClock", "carries_text"]

Api = Literal["chat", "responses"]


def carries_text(api: Api, name: bytes | None, data: bytes) -> bool:
    """Whether one SSE event (its ``event:`` name and ``data``) carries output text (see the module doc)."""
    if data == b"[DONE]":
        return False
    try:
        event: Any = json.loads(data)
    except ValueError:
        return False
    if not isinstance(event, dict):
        return False
    if api == "chat":
        for choice in event.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")):
                return True
        return False
    kind = name.decode("utf-8", "replace") if name is not None else event.get("type")
    return kind in TEXT_DELTAS and bool(event.get("delta"))


class StreamClock:
    """Fed each read of a stream with its arrival time; keeps the arrival time of every text event."""

    __slots__ = ("_api", "_parser", "events", "t0", "text_times")

    def __init__(self, api: Api, t0: float) -> None:
        self._api = api
        self._parser = SseParser()
        self.t0 = t0
        self.text_times: list[float] = []
        self.events: list[tuple[bytes | None, bytes]] = []  # every complete event, for callers that judge the stream

    def feed(self, chunk: bytes, now: float) -> None:
        for name, data in self._parser.feed(chunk):
            self.events.append((name, data))
            if carries_text(self._api, name, data):
                self.text_times.append(now)

    def tail(self) -> bytes:
        return self._parser.tail()

    @property
    def ttft(self) -> float | None:
        """Seconds from sending to the first text event (None: no text)."""
        return self.text_times[0] - self.t0 if self.text_times else None

    @property
    def itl(self) -> float | None:
        """Seconds: the mean gap between the first and the last text event (None below two)."""
        n = len(self.text_times)
        return (self.text_times[-1] - self.text_times[0]) / (n - 1) if n > 1 else None
