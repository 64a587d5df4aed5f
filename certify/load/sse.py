"""Reading a response as the load client sees it: SSE streams (TTFT, inter-token latency) and JSON bodies.

:class:`StreamProbe` is fed the stream's bytes as they arrive, with the time each piece arrived. TTFT and
inter-token latency are the overhead measurement's (:mod:`certify.perf.reading`: the first event carrying
output text; ITL the mean gap between the first and the last text event). The probe decides whether the
stream ended properly (chat: ``[DONE]``; Responses: ``response.completed`` or ``response.incomplete``) and
reports the first error event.
Nothing here imports locust, so pytest can test it directly.
"""

from __future__ import annotations

import json

from certify.perf.reading import StreamClock

__all__ = ["StreamProbe", "check_unary"]

_DONE_TYPES = {"response.completed", "response.incomplete"}


class StreamProbe:
    """One stream as the load client reads it: TTFT and ITL by :class:`certify.perf.reading.StreamClock`
    (the one definition), and the verdict (ended properly, no error event)."""

    def __init__(self, api: str, t0: float) -> None:
        self.api = api
        self.t0 = t0
        self._clock = StreamClock("chat" if api == "chat" else "responses", t0)
        self._judged = 0
        self.done = False
        self.error: str | None = None

    @property
    def text_times(self) -> list[float]:
        return self._clock.text_times

    def feed(self, chunk: bytes, now: float) -> None:
        self._clock.feed(chunk, now)
        events = self._clock.events
        for name, data in events[self._judged :]:
            self._judge(name, data)
        self._judged = len(events)

    def _judge(self, name: bytes | None, payload: bytes) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(payload)
        except ValueError:
            self._fail(f"undecodable SSE data: {payload[:80]!r}")
            return
        if not isinstance(event, dict):
            self._fail("SSE data is not an object")
            return
        if self.api == "chat":
            if "error" in event:
                self._fail(f"error event: {str(event['error'])[:200]}")
            return
        kind = name.decode("utf-8", "replace") if name is not None else event.get("type")
        if kind in _DONE_TYPES:
            self.done = True
        elif kind in ("error", "response.failed"):
            self._fail(f"{kind}: {str(event.get('error') or event.get('response', ''))[:200]}")

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message

    @property
    def ttft_ms(self) -> float | None:
        ttft = self._clock.ttft
        return None if ttft is None else ttft * 1000

    @property
    def itl_ms(self) -> float | None:
        itl = self._clock.itl
        return None if itl is None else itl * 1000

    def verdict(self) -> str | None:
        """None when the stream is a success, else why it is a failure."""
        if self.error is not None:
            return self.error
        if not self.done:
            return "stream ended without its final event"
        if not self.text_times:
            return "stream carried no output text"
        return None


def check_unary(api: str, body: bytes) -> str | None:
    """None when a non-stream body is a completed answer, else why not."""
    try:
        data = json.loads(body)
    except ValueError:
        return "response body is not JSON"
    if not isinstance(data, dict):
        return "response body is not an object"
    if api == "chat":
        return None if isinstance(data.get("choices"), list) and data["choices"] else "no choices in the response"
    if data.get("status") not in ("completed", "incomplete"):
        return f"response status {data.get('status')!r}"
    return None
