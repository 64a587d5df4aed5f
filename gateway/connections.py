"""The gateway's HTTP connections: how long a client may take, how many it may hold, headers that must be single.

Owns :class:`HttpLimits` and :class:`GatewayServer` (aiohttp's low-level server, whose connection handler
names no server version in its own error answers). Any process that reaches a gateway's port (a trial's
container included) meets these bounds before it shows a token:

- **Header timeout** (``header_timeout_s``): a connection's first request head must be complete within it
  from the connection's open, and a later head within it from its first byte; else the connection gets 408
  ``inference_request_timeout`` (after the answers to the requests before it, pipelining keeps its order) and
  is closed. A head whose first bytes came in the same read as the end of the body before it is bounded by
  the idle timeout instead (the parser does not tell where that body ended).
- **Body timeout** (``body_timeout_s``): the whole body must arrive within it once the handler reads it
  (:func:`gateway.intake.read_body`); else 408 ``inference_request_timeout`` and the connection is closed
  (:func:`close_after`), its unread body never waited for.
- **Idle timeout** (``idle_timeout_s``): a kept-alive connection with no request in progress and no byte of
  the next one is closed silently (aiohttp's keep-alive timeout).
- **Connection cap** (``max_connections``, per gateway, all its listeners together): a connection past it is
  answered at once with 503 ``inference_connection_limit`` (``Retry-After``, ``Connection: close``), its
  input is read and dropped for at most :data:`REFUSAL_LINGER_S` so the client reads the answer rather than a
  reset, and it is closed. Connections already open keep being served, pipelined requests in order.
- **Singleton headers**: a request carrying ``Authorization``, ``Content-Length``, ``Host`` or
  ``Content-Type`` more than once is 400 ``inference_header_duplicated`` (an ambiguous credential or framing
  is refused, never resolved by taking the first). aiohttp's parser refuses the last three before a handler
  runs; :meth:`_Protocol.handle_error` gives that refusal this code, and :func:`duplicated_header` checks
  every one of them in the handler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDictProxy

from gateway.replies import SERVER_NAME, error_reply, raw_error_reply

__all__ = ["REFUSAL_LINGER_S", "SINGLETON_HEADERS", "GatewayServer", "HttpLimits", "close_after", "duplicated_header"]

log = logging.getLogger("gateway.connections")

SINGLETON_HEADERS = ("Authorization", "Content-Length", "Host", "Content-Type")
REFUSAL_LINGER_S = 2.0  # how long a refused connection's input is drained before it is closed
_DUPLICATE_MESSAGE = "the request carries a header more than once that must appear once: {}"


@dataclass(frozen=True)
class HttpLimits:
    """The bounds every connection of one gateway is held to (see the module's doc)."""

    header_timeout_s: float = 30.0
    body_timeout_s: float = 60.0
    idle_timeout_s: float = 120.0
    max_connections: int = 1024


def duplicated_header(headers: CIMultiDictProxy[str]) -> str | None:
    """The first singleton header the request carries more than once, else None."""
    for name in SINGLETON_HEADERS:
        if len(headers.getall(name, ())) > 1:
            return name
    return None


async def close_after(request: web.BaseRequest, resp: web.StreamResponse) -> web.StreamResponse:
    """Send ``resp`` now and close the connection behind it, without reading what is left of the request (a
    stalled body): aiohttp would otherwise linger on that body before closing."""
    resp.force_close()
    await resp.prepare(request)
    await resp.write_eof()
    request.protocol.force_close()  # the transport flushes the reply, then closes
    return resp


class _Refusal(asyncio.Protocol):
    """A connection past the cap: the 503 at once, the client's input dropped, closed within the linger."""

    def __init__(self, loop: asyncio.AbstractEventLoop, reply: bytes, done: Callable[[], None]) -> None:
        self._loop = loop
        self._reply = reply
        self._done = done
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        tcp.write(self._reply)
        if tcp.can_write_eof():
            tcp.write_eof()
        self._timer = self._loop.call_later(REFUSAL_LINGER_S, tcp.close)

    def data_received(self, data: bytes) -> None:
        pass  # read and dropped, so closing does not reset the connection before the client reads the answer

    def eof_received(self) -> bool:
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._done()


class _Protocol(RequestHandler):
    """aiohttp's connection handler with the header timeout, and error answers that name no server version."""

    def __init__(self, manager: GatewayServer, **kwargs: Any) -> None:
        super().__init__(manager, keepalive_timeout=manager.limits.idle_timeout_s, **kwargs)
        self._limits = manager.limits
        self._on_refusal = manager.on_refusal
        self._head_timer: asyncio.TimerHandle | None = None
        self._last_payload: StreamReader | None = None  # the body of the newest request parsed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm_head_timer()  # the first head is due from the connection's open

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        body_done = self._last_payload is None or self._last_payload.is_eof()  # so these bytes begin a head
        super().data_received(data)
        if self._request_count != before:
            self._disarm_head_timer()  # a head is complete (or refused): its handler owns the connection now
            if self._messages:
                self._last_payload = self._messages[-1][1]
        elif data and body_done:
            self._arm_head_timer()  # bytes of a head not complete yet

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm_head_timer()
        self._last_payload = None
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self._head_timer is None and self._limits.header_timeout_s > 0:
            self._head_timer = self._loop.call_later(self._limits.header_timeout_s, self._head_expired)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or self._force_close or self._messages:
            return  # closed already, or the head did complete
        if self._request_in_progress:  # a head pipelined behind a request being answered: its clock goes on
            self._arm_head_timer()
            return
        self._on_refusal("inference_request_timeout")
        timeout = self._limits.header_timeout_s
        transport.write(raw_error_reply("inference_request_timeout", f"the request head did not arrive within {timeout:g} s"))
        self.force_close()

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if isinstance(exc, BadHttpMessage) and "Duplicate" in str(exc.message):
            self._on_refusal("inference_header_duplicated")
            log.debug("refused a request with a duplicated header: %s", exc.message)
            resp: web.StreamResponse = error_reply("inference_header_duplicated", _DUPLICATE_MESSAGE.format(exc.message))
            resp.force_close()  # the request's framing is in doubt: nothing more is read on this connection
            return resp
        resp = super().handle_error(request, status, exc, message)
        resp.headers["Server"] = SERVER_NAME
        return resp


class GatewayServer(web.Server):
    """aiohttp's low-level server with :class:`HttpLimits`; ``on_refusal`` counts each refusal by its code."""

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        *,
        limits: HttpLimits,
        on_refusal: Callable[[str], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, **kwargs)
        self.limits = limits
        self.on_refusal = on_refusal
        self.lingering = 0  # refused connections still open

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def __call__(self) -> RequestHandler:
        if len(self._connections) >= self.limits.max_connections:
            return self._refuse()  # type: ignore[return-value]  # the event loop takes any asyncio.Protocol
        return _Protocol(self, loop=self._loop, **self._kwargs)

    def _refuse(self) -> asyncio.Protocol:
        self.on_refusal("inference_connection_limit")
        if self.lingering >= self.limits.max_connections:
            return _Abort()  # a flood of refusals is closed without a word: their descriptors stay bounded too
        self.lingering += 1
        cap = self.limits.max_connections
        reply = raw_error_reply("inference_connection_limit", f"the gateway holds its most open connections ({cap})")
        return _Refusal(self._loop, reply, self._refused_closed)

    def _refused_closed(self) -> None:
        self.lingering -= 1


class _Abort(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).abort()
