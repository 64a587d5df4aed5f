"""The gateway's HTTP/1.1 client for its one hop to the engine (spec §9.2): POST, never retried (and the GET
of the engine's load the abort check makes, :mod:`gateway.slot_probe`).

Owns :class:`EnginePool` (keep-alive connections per engine origin; a POST is sent whole and its answer's
head awaited). The answer itself, its body and how it ends, is :mod:`gateway.engine_answer`'s.

Why not aiohttp's client: on a 2-core CPU engine every microsecond the gateway spends per streamed event is
taken from the engine, and aiohttp's read path (HTTP parser callback, ``StreamReader``, ``readany`` future,
the relay task's wake-up) was most of the gateway's ~150 µs of user CPU per event (measured on the fake
engine, 128-token streams, c=1; ``python -m certify.perf``).

An idle connection is kept at most ``idle_s`` (below uvicorn's 5 s keep-alive, so the engine never closes one
just as a request reuses it); a connection whose answer did not end cleanly is closed, which makes the engine
abort that request."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

from gateway.engine_answer import EngineBodyEnded, EngineRelayStopped, EngineResponse, EngineStreamIdle, Sink

__all__ = [
    "EngineBodyEnded", "EngineConnection", "EnginePool", "EngineRelayStopped", "EngineResponse", "EngineStreamIdle", "Sink",
]  # fmt: skip


@functools.lru_cache(maxsize=64)
def _address(origin: str) -> tuple[str, int, str]:
    parts = urlsplit(origin)
    if parts.scheme != "http" or parts.hostname is None or parts.port is None:
        raise ValueError(f"not a plain http origin with a port: {origin!r}")
    return parts.hostname, parts.port, parts.netloc


def _request_head(method: str, netloc: str, path: str, headers: Mapping[str, str], body_len: int) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {netloc}"]
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
            raise ValueError("a header for the engine holds a line break")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {body_len}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


class EngineConnection(asyncio.Protocol):
    """One keep-alive connection to the engine; one answer at a time."""

    def __init__(self, key: tuple[str, int]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.idle_since = 0.0
        self._response: EngineResponse | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        response = self._response
        if response is None:  # bytes nobody asked for: the connection is no longer in a known state
            self.close()
            return
        response.feed(data)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._response is not None:
            self._response.connection_lost()

    def reusable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    def begin(self, response: EngineResponse) -> None:
        self._response = response

    def end(self) -> None:
        self._response = None


class EnginePool:
    """Keep-alive connections to engines, per origin; a POST on a connection is never retried."""

    def __init__(self, idle_s: float = 2.0, connect_timeout_s: float = 5.0) -> None:
        self._idle: dict[tuple[str, int], list[EngineConnection]] = {}
        self._idle_s = idle_s
        self._connect_timeout = connect_timeout_s
        self._closed = False

    async def post(
        self, origin: str, path: str, body: bytes, headers: Mapping[str, str], timeout_s: float, idle_s: float | None = None
    ) -> EngineResponse:
        """Send the request and wait for the answer's head (status and headers).

        Raises ``OSError`` / ``TimeoutError`` when the engine cannot be reached, :class:`EngineBodyEnded`
        when it closed or broke the connection before its head, ``TimeoutError`` after ``timeout_s``,
        :class:`EngineStreamIdle` when ``idle_s`` passes without a byte from the engine (head or body)."""
        return await self._send("POST", origin, path, body, headers, timeout_s, idle_s)

    async def get(self, origin: str, path: str, headers: Mapping[str, str], timeout_s: float) -> EngineResponse:
        """A GET (the engine's load, for the abort check); raises as :meth:`post`."""
        return await self._send("GET", origin, path, b"", headers, timeout_s, None)

    async def _send(
        self, method: str, origin: str, path: str, body: bytes, headers: Mapping[str, str], timeout_s: float, idle_s: float | None
    ) -> EngineResponse:
        loop = asyncio.get_running_loop()
        host, port, netloc = _address(origin)
        head = _request_head(method, netloc, path, headers, len(body))
        key = (host, port)
        idle = self._take(key)
        if idle is not None:
            conn = idle
        else:
            connecting = loop.create_connection(lambda: EngineConnection(key), host, port)
            _, conn = await asyncio.wait_for(connecting, self._connect_timeout)
        response = EngineResponse(conn, self, loop, timeout_s, idle_s)
        try:
            transport = conn.transport
            if transport is None or not conn.reusable():  # the engine closed it at once (before our request)
                raise EngineBodyEnded("the engine closed the connection before the request was sent", by_engine=True)
            if len(body) < 65536:
                transport.write(head + body)  # one segment for the common request
            else:
                transport.writelines((head, body))
            await response.head()
        except BaseException:
            response.close()
            raise
        return response

    def _take(self, key: tuple[str, int]) -> EngineConnection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.reusable() and now - conn.idle_since < self._idle_s:
                return conn
            conn.close()
        return None

    def idle(self, conn: EngineConnection) -> None:
        if self._closed:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= 8:  # connections the engine closed while they waited at the bottom of the stack
            idle[:] = [c for c in idle if c.reusable()]
        idle.append(conn)

    def close(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
