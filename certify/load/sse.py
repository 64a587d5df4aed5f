"""Reading a response as the load client sees it: SSE streams (TTFT, inter-token latency) and JSON bodies.

:class:`StreamProbe` is fed the stream's bytes as they arrive, with the time each piece arrived; it parses
``data:`` lines and keeps the arrival time of every event that carries output text (chat: a
``choices[].delta.content`` or ``reasoning_content``; Responses: ``response.output_text.delta``). It decides
whether the stream ended properly (chat: ``[DONE]``; Responses: ``response.completed`` or
``response.incomplete``) and reports the first error event. Inter-token latency is per request: the mean
gap between the first and the last text event, ``(t_last - t_first) / (n - 1)``.
Nothing here imports locust, so pytest can test it directly.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["StreamProbe", "check_unary"]

_DONE_TYPES = {"response.completed", "response.incomplete"}


class StreamProbe:
    def __init__(self, api: str, t0: float) -> None:
        self.api = api
        self.t0 = t0
        self.text_times: list[float] = []
        self.done = False
        self.error: str | None = None
        self._buf = b""

    def feed(self, chunk: bytes, now: float) -> None:
        self._buf += chunk
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return
            line, self._buf = self._buf[:nl].rstrip(b"\r"), self._buf[nl + 1 :]
            if line.startswith(b"data:"):
                self._data(line[5:].strip(), now)

    def _data(self, payload: bytes, now: float) -> None:
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
        if "error" in event and self.api == "chat":
            self._fail(f"error event: {str(event['error'])[:200]}")
        elif self.api == "chat":
            if _chat_has_text(event):
                self.text_times.append(now)
        else:
            kind = event.get("type")
            if kind == "response.output_text.delta" and event.get("delta"):
                self.text_times.append(now)
            elif kind in _DONE_TYPES:
                self.done = True
            elif kind in ("error", "response.failed"):
                self._fail(f"{kind}: {str(event.get('error') or event.get('response', ''))[:200]}")

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message

    @property
    def ttft_ms(self) -> float | None:
        return (self.text_times[0] - self.t0) * 1000 if self.text_times else None

    @property
    def itl_ms(self) -> float | None:
        n = len(self.text_times)
        return (self.text_times[-1] - self.text_times[0]) * 1000 / (n - 1) if n > 1 else None

    def verdict(self) -> str | None:
        """None when the stream is a success, else why it is a failure."""
        if self.error is not None:
            return self.error
        if not self.done:
            return "stream ended without its final event"
        if not self.text_times:
            return "stream carried no output text"
        return None


def _chat_has_text(event: dict[str, Any]) -> bool:
    choices = event.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")):
            return True
    return False


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
