"""One engine answer as the gateway reads it (spec §9.2): status, headers, then its body, de-chunked.

Owns :class:`EngineResponse` and the ways an answer ends other than cleanly (:class:`EngineBodyEnded`,
:class:`EngineStreamIdle`, :class:`EngineRelayStopped`). The connection it is read from, and the request that
asked for it, are :mod:`gateway.engine_http`'s. The body is read one of two ways:

- **pulled** (:meth:`EngineResponse.read`, a coroutine per read): the unary answer, the first bytes of a
  stream (they leave with the client's response headers) and streams to HTTP/1.0 clients;
- **pushed** (:meth:`EngineResponse.push`): every later read of a stream goes to a sink called from the engine
  socket's own callback, which writes it to the client at once — no parser object, stream buffer, future or
  task wake-up per event. The relay's coroutine sleeps in :meth:`EngineResponse.pushed` until the body ends,
  breaks, or the sink asks to pause because the client's socket is full (the engine's socket stops being
  read until :meth:`EngineResponse.resume`: backpressure reaches the engine).

A stream's answer may carry an idle timeout (the lock's ``stream_idle_timeout_ms``): when the engine sends
nothing that long (the head included) the answer fails with :class:`EngineStreamIdle` and its connection is
closed. One timer per answer, re-armed lazily; time the relay paused reading (client backpressure) is never
counted as the engine's silence.

The engine is a known local HTTP/1.1 server (SGLang's uvicorn, or the fake): answers are framed by
``Content-Length``, ``Transfer-Encoding: chunked`` or the connection's close. Anything else malformed ends
the body as broken (:class:`EngineBodyEnded`), never as a clean end.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from multidict import CIMultiDict

from harness.errors import HitchError

if TYPE_CHECKING:
    from gateway.engine_http import EngineConnection, EnginePool

__all__ = ["EngineBodyEnded", "EngineRelayStopped", "EngineResponse", "EngineStreamIdle", "Sink"]

Sink = Callable[[bytes, float], bool]  # (payload, read time) -> pause reading?  May raise: the relay ends.
Wake = Literal["end", "paused"]

_HEAD_LIMIT = 64 * 1024
_SIZE_LINE_LIMIT = 1024
_PULL_HIGH_WATER = 256 * 1024  # pulled but unread bytes beyond this pause the engine's socket
_NO_BODY = frozenset({204, 304})


class EngineBodyEnded(Exception):
    """The engine's answer ended before its framing said it was complete, or broke its framing.

    ``by_engine``: the engine closed the connection itself (it ended the request: nothing is left running there
    for the gateway to abort), as opposed to an answer the gateway gave up on (malformed framing)."""

    def __init__(self, message: str, *, by_engine: bool = False) -> None:
        super().__init__(message)
        self.by_engine = by_engine


class EngineStreamIdle(Exception):
    """The engine sent nothing for the stream's idle timeout (time the gateway paused reading is not counted)."""


class EngineRelayStopped(Exception):
    """The gateway ends this answer itself (an operator stopped the run's service): ``error`` says why."""

    def __init__(self, error: HitchError) -> None:
        super().__init__(error.message)
        self.error = error


class EngineResponse:
    """One engine answer. Awaited by :meth:`EnginePool.post` until its head is read."""

    def __init__(
        self, conn: EngineConnection, pool: EnginePool, loop: asyncio.AbstractEventLoop, timeout_s: float, idle_s: float | None
    ) -> None:
        self._conn = conn
        self._pool = pool
        self._loop = loop
        self.status = 0
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.content_type = ""
        self.ended_at: float | None = None  # when the body's end was read
        self._head: asyncio.Future[None] = loop.create_future()
        self._buf = bytearray()  # the head, or the unparsed tail of the chunked framing
        self._phase = "head"  # head | body | done | broken
        self._framing: Literal["length", "chunked", "close"] = "close"
        self._left = 0  # length: body bytes to come; chunked: bytes of the current chunk's data to come
        self._chunk_crlf = False  # chunked: the CRLF after a chunk's data is still to come
        self._trailers = False  # chunked: the last chunk was read, trailers (or the final CRLF) to come
        self._keep_alive = True
        self._error: BaseException | None = None
        self._queue: collections.deque[bytes] = collections.deque()  # pulled mode: read, not yet taken
        self._queued = 0
        self._queued_at = 0.0
        self.read_at = 0.0  # when the bytes the last read() returned were read from the socket
        self._waiter: asyncio.Future[Wake] | None = None
        self._sink: Sink | None = None
        self._paused = False
        self._released = False
        self._deadline = loop.call_later(timeout_s, self._timed_out)
        self._idle_s = idle_s
        self._last_data = time.perf_counter()  # the idle clock: the request's send, then every read
        self._idle = loop.call_later(idle_s, self._idle_check) if idle_s is not None else None
        conn.begin(self)

    # ---- the engine's bytes (called from the connection's callbacks) ----

    def feed(self, data: bytes) -> None:
        now = self._last_data = time.perf_counter()
        try:
            if self._phase == "head":
                self._buf += data
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buf) > _HEAD_LIMIT:
                        raise EngineBodyEnded("the engine's response head is too large")
                    return
                head, rest = bytes(self._buf[:end]), bytes(self._buf[end + 4 :])
                self._buf = bytearray()
                if not self._parse_head(head):
                    if rest:
                        self.feed(rest)  # an interim 1xx answer: the real head follows
                    return
                if not self._head.done():
                    self._head.set_result(None)
                if self._phase == "done" or not rest:
                    return
                data = rest
            if self._phase != "body":
                self._keep_alive = False  # bytes after the end: this connection is not reused
                return
            payload = self._body(data)
            if payload:
                self._deliver(payload, now)
            if self._phase == "done":
                self._wake("end")
        except Exception as exc:
            self._fail(exc)

    def _parse_head(self, head: bytes) -> bool:
        """The status line and headers; False for an interim 1xx answer."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise EngineBodyEnded("the engine's status line is not HTTP/1.x")
        status = int(parts[1])
        if 100 <= status < 200:
            return False
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise EngineBodyEnded("a malformed header in the engine's answer")
            headers.add(name, value.strip())
        self.status, self.headers = status, headers
        self.content_type = headers.get("Content-Type", "").partition(";")[0].strip().lower()
        connection = headers.get("Connection", "").lower()
        self._keep_alive = parts[0] == "HTTP/1.1" and "close" not in connection
        encoding = headers.get("Transfer-Encoding", "").lower()
        length = headers.get("Content-Length")
        self._phase = "body"
        if status in _NO_BODY:
            self._phase = "done"
        elif encoding:
            if encoding != "chunked":
                raise EngineBodyEnded(f"unsupported transfer encoding from the engine: {encoding}")
            self._framing = "chunked"
        elif length is not None:
            if not length.isdigit():
                raise EngineBodyEnded("a malformed Content-Length from the engine")
            self._framing, self._left = "length", int(length)
            if self._left == 0:
                self._phase = "done"
        else:
            self._framing, self._keep_alive = "close", False
        if self._phase == "done":
            self.ended_at = time.perf_counter()
        return True

    def _body(self, data: bytes) -> bytes:
        """The payload bytes in ``data``; sets the phase to done at the body's end."""
        if self._framing == "close":
            return data
        if self._framing == "length":
            if len(data) > self._left:
                raise EngineBodyEnded("the engine sent more than its Content-Length")
            self._left -= len(data)
            if self._left == 0:
                self._phase, self.ended_at = "done", time.perf_counter()
            return data
        if self._buf:
            self._buf += data
            data, self._buf = bytes(self._buf), bytearray()
        elif not (self._left or self._chunk_crlf or self._trailers):
            # the common read: exactly one whole chunk (one SSE event, as SGLang writes them)
            eol = data.find(b"\r\n", 0, 18)
            if eol > 0 and data.endswith(b"\r\n"):
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = 0
                if size > 0 and len(data) == eol + size + 4:
                    return data[eol + 2 : -2]
        out: list[bytes] = []
        pos, n = 0, len(data)
        while pos < n:
            if self._left:
                take = min(self._left, n - pos)
                out.append(data[pos : pos + take] if take != n else data)
                pos += take
                self._left -= take
                self._chunk_crlf = self._left == 0
                continue
            if self._chunk_crlf:
                if n - pos < 2:
                    self._buf += data[pos:]
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise EngineBodyEnded("a chunk of the engine's answer is not followed by CRLF")
                pos += 2
                self._chunk_crlf = False
                continue
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > _SIZE_LINE_LIMIT:
                    raise EngineBodyEnded("a chunk size line from the engine is too long")
                self._buf += data[pos:]
                break
            line = data[pos:eol]
            pos = eol + 2
            if self._trailers:
                if not line:  # the blank line after the last chunk: the answer is complete
                    if pos != n:
                        raise EngineBodyEnded("bytes after the end of the engine's answer")
                    self._phase, self.ended_at = "done", time.perf_counter()
                    break
                continue  # a trailer field: not relayed
            size_text = line.partition(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise EngineBodyEnded("a malformed chunk size from the engine") from None
            if size < 0 or size_text[:1] in (b"-", b"+"):
                raise EngineBodyEnded("a malformed chunk size from the engine")
            if size == 0:
                self._trailers = True
            else:
                self._left = size
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    def _deliver(self, payload: bytes, now: float) -> None:
        sink = self._sink
        if sink is not None:
            if sink(payload, now) and self._phase != "done":
                self._pause()
                self._wake("paused")
            return
        if not self._queue:
            self._queued_at = now
        self._queue.append(payload)
        self._queued += len(payload)
        if self._queued > _PULL_HIGH_WATER:
            self._pause()
        self._wake("end")  # wakes a pending read

    def connection_lost(self) -> None:
        if self._phase == "body" and self._framing == "close":
            self._phase, self.ended_at = "done", time.perf_counter()
            self._wake("end")
        elif self._phase in ("head", "body"):
            self._fail(EngineBodyEnded("the engine closed the connection before its answer ended", by_engine=True))

    def _fail(self, exc: BaseException) -> None:
        if self._phase in ("broken", "done"):
            self._keep_alive = False
            return
        self._phase, self._error = "broken", exc
        self._pause()
        if not self._head.done():
            self._head.set_exception(exc)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _wake(self, wake: Wake) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(wake)

    def _pause(self) -> None:
        transport = self._conn.transport
        if not self._paused and transport is not None and not transport.is_closing():
            self._paused = True
            transport.pause_reading()

    def _timed_out(self) -> None:
        if self._phase == "done":
            return
        self._fail(TimeoutError("the engine's answer did not end within the request timeout"))
        self._conn.close()

    def _idle_check(self) -> None:
        """One timer per answer, re-armed for the rest of the window (no timer per read); a paused read is
        the client's backpressure, not the engine's silence."""
        self._idle = None
        idle_s = self._idle_s
        if self._phase in ("done", "broken") or idle_s is None:
            return
        if self._paused:
            self._last_data = time.perf_counter()
        silent = time.perf_counter() - self._last_data
        if silent < idle_s:
            self._idle = self._loop.call_later(idle_s - silent, self._idle_check)
            return
        self._fail(EngineStreamIdle(f"the engine sent nothing for {idle_s * 1000:.0f} ms"))
        self._conn.close()

    def stop(self, exc: BaseException) -> None:
        """End the answer now with ``exc`` (raised by the relay's next read) and close the engine connection."""
        if self._phase in ("done", "broken"):
            return
        self._fail(exc)
        self._conn.close()

    # ---- the relay's side ----

    async def read(self) -> bytes:
        """The next payload bytes (b"" at the body's clean end); raises :class:`EngineBodyEnded` or
        ``TimeoutError`` when it broke."""
        while True:
            if self._queue:
                data = self._queue.popleft() if len(self._queue) == 1 else b"".join(self._queue)
                self._queue.clear()
                self._queued = 0
                self.read_at = self._queued_at
                self.resume()
                return data
            if self._error is not None:
                raise self._error
            if self._phase == "done":
                return b""
            self._waiter = self._loop.create_future()
            await self._waiter

    async def head(self) -> None:
        """Wait for the status line and headers."""
        await self._head

    def push(self, sink: Sink) -> None:
        """From now on every payload goes to ``sink`` (called with its read time) as it is read; what was
        read and not yet taken goes first, here (a sink's exception propagates to the caller)."""
        self._sink = sink
        if self._queue:
            data = b"".join(self._queue)
            self._queue.clear()
            self._queued = 0
            if sink(data, time.perf_counter()) and self._phase != "done":
                self._pause()
            elif self._phase == "body":
                self.resume()

    async def pushed(self) -> bool:
        """Wait while payloads are pushed: False at the body's clean end; True when the sink asked to pause
        (reading stays paused until :meth:`resume`); raises as :meth:`read`."""
        if self._error is not None:
            raise self._error
        if self._phase == "done":
            return False
        if self._paused:
            return True
        self._waiter = self._loop.create_future()
        return await self._waiter == "paused"

    def resume(self) -> None:
        transport = self._conn.transport
        if self._paused and self._phase == "body" and transport is not None and not transport.is_closing():
            self._paused = False
            self._last_data = time.perf_counter()
            transport.resume_reading()

    def release(self) -> None:
        """The answer was read to its clean end: the connection goes back to the pool (or is closed)."""
        self._end(self._phase == "done" and self._keep_alive and not self._queue)

    def close(self) -> None:
        """Close the connection now (the engine aborts a request still running on it)."""
        self._end(False)

    def _end(self, keep: bool) -> None:
        if self._released:
            return
        self._released = True
        self._deadline.cancel()
        if self._idle is not None:
            self._idle.cancel()
        self._conn.end()
        if keep and self._conn.reusable():
            self._pool.idle(self._conn)
        else:
            self._conn.close()
