"""The one SSE reader: bytes in, events out (reference §4.1).

Sits at the bottom of the tree (it imports nothing of ours) because two layers that may not import each other
read SSE: the gateway, which relays a stream and acts on what its events say (``gateway.sse`` builds its
stream observer on :class:`SseParser` and re-exports this module's names), and the fake engine's parity diff
(``fixtures``), which compares the wire form of the fake's streams with real SGLang's.

Two readings of the same blocks:

- a client's (the default): ``\\r\\n`` framing is accepted, ``data:`` with or without its space, comments
  (heartbeats), ``id:`` and ``retry:`` lines are read through, an event with neither data nor a name is
  dropped and an unterminated tail is not an event (a reader that cares about it asks :meth:`SseParser.tail`);
- the wire's (``keep_framing=True``): nothing is normalised; a line that is not exactly ``event: NAME`` or
  ``data: VALUE`` is kept, verbatim and in order, in the event's ``framing``, and every non-empty block is an
  event, the unterminated tail included, so any framing difference between two streams shows.

Events are cut at blank lines on *bytes*, so a multibyte character split across reads is never decoded
half-way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["SseEvent", "SseParser", "parse_events"]


class SseParser:
    """Bytes in, ``(event_name, data_bytes)`` out; keeps the unterminated tail between reads."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        out: list[tuple[bytes | None, bytes]] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:  # the common one-line event
                out.append((None, block[6:]))
                continue
            name, data, _ = _parse_block(block, keep_framing=False)
            if data or name is not None:
                out.append((name, b"\n".join(data)))
        return out

    def tail(self) -> bytes:
        """What is left after the last complete event (a partial event when not blank)."""
        return self._buf


@dataclass(frozen=True)
class SseEvent:
    """One event of a whole stream body, for readers that have all of it (checks, tests, parity).

    ``framing``: only with ``keep_framing``, the block's lines that are not canonical ``event: ``/``data: ``
    lines (comments, ``id:``, ``data:`` without its space, a stray ``\\r``…), verbatim."""

    event: str | None
    data: str
    framing: tuple[str, ...] = ()

    def json(self) -> Any:
        return json.loads(self.data)


def parse_events(raw: bytes, *, keep_framing: bool = False) -> list[SseEvent]:
    """Every event of a whole SSE body: by default a client's reading, through the one :class:`SseParser`
    (an unterminated tail is not an event); with ``keep_framing`` the wire's (see the module's docstring)."""
    if not keep_framing:
        return [SseEvent(_text(name), data.decode("utf-8", "replace")) for name, data in SseParser().feed(raw)]
    events: list[SseEvent] = []
    for block in raw.split(b"\n\n"):
        if block:
            name, data, framing = _parse_block(block, keep_framing=True)
            text = b"\n".join(data).decode("utf-8", "replace")
            events.append(SseEvent(_text(name), text, tuple(line.decode("utf-8", "replace") for line in framing)))
    return events


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def _parse_block(block: bytes, *, keep_framing: bool) -> tuple[bytes | None, list[bytes], list[bytes]]:
    """``(name, data lines, framing lines)`` of one block; framing lines are collected only when kept."""
    name: bytes | None = None
    data: list[bytes] = []
    framing: list[bytes] = []
    for line in block.split(b"\n"):
        if keep_framing:
            if line.startswith(b"data: "):
                data.append(line[6:])
            elif line.startswith(b"event: "):
                name = line[7:]
            else:
                framing.append(line)
        elif line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
        elif line.startswith(b"event:"):
            name = line[6:].strip()
        # a client reads through ":" comments (heartbeats), "id:" and "retry:" lines: they carry nothing it needs
    return name, data, framing
