"""The gateway's engine client (gateway.engine_http) against a scripted HTTP server on a real socket: every
framing the engine may use, split at every byte; early ends; keep-alive reuse; the pushed mode's pause."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from gateway.engine_http import EngineBodyEnded, EnginePool, EngineResponse, EngineStreamIdle

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

_EVENTS = [b'data: {"n":%d}\n\n' % i for i in range(5)] + [b"data: [DONE]\n\n"]
_CHUNKED = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in _EVENTS) + b"0\r\n\r\n"
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return head + await reader.readexactly(length)


def _run(
    script: Script, client: Callable[[EnginePool, str], Awaitable[None]], connections: list[int] | None = None
) -> list[bytes]:
    """Serve ``script`` per request on loopback (keep-alive: requests in a row on one connection); run
    ``client``; returns every request the server read (and counts connections into ``connections``)."""
    seen: list[bytes] = []

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if connections is not None:
                connections.append(1)
            try:
                while not reader.at_eof():
                    try:
                        seen.append(await _read_request(reader))
                    except (asyncio.IncompleteReadError, ConnectionError):
                        return
                    await script(reader, writer)
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = EnginePool()
        try:
            await client(pool, f"http://127.0.0.1:{port}")
        finally:
            pool.close()
            server.close()

    uvloop.run(main())
    return seen


async def _pull_all(response: EngineResponse) -> bytes:
    parts = []
    while chunk := await response.read():
        parts.append(chunk)
    return b"".join(parts)


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, len(_HEAD + _CHUNKED)])
def test_a_chunked_answer_split_anywhere_is_read_whole(step: int) -> None:
    answer = _HEAD + _CHUNKED

    async def script(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(0, len(answer), step):
            writer.write(answer[i : i + step])
            await writer.drain()
            await asyncio.sleep(0)

    bodies: list[bytes] = []

    async def client(pool: EnginePool, origin: str) -> None:
        response = await pool.post(origin, "/v1/chat/completions", b"{}", {"Authorization": "Bearer k"}, 30)
        assert (response.status, response.content_type) == (200, "text/event-stream")
        bodies.append(await _pull_all(response))
        response.release()

    [request] = _run(script, client)
    assert bodies == [b"".join(_EVENTS)]
    assert request.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and b"\r\nAuthorization: Bearer k\r\n" in request
    assert request.endswith(b"Content-Length: 2\r\n\r\n{}")


def test_a_content_length_answer_and_keep_alive_reuse_one_connection() -> None:
    async def script(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()

    async def client(pool: EnginePool, origin: str) -> None:
        for _ in range(3):
            response = await pool.post(origin, "/v1/x", b"{}", {}, 30)
            assert response.status == 200 and await _pull_all(response) == b"hello"
            response.release()

    connections: list[int] = []
    assert len(_run(script, client, connections)) == 3 and len(connections) == 1


def test_an_answer_ended_by_close_is_complete_and_not_reused() -> None:
    async def script(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of it")
        await writer.drain()
        writer.close()

    async def client(pool: EnginePool, origin: str) -> None:
        for _ in range(2):
            response = await pool.post(origin, "/v1/x", b"{}", {}, 30)
            assert await _pull_all(response) == b"all of it"
            response.release()

    connections: list[int] = []
    assert len(_run(script, client, connections)) == 2 and len(connections) == 2


@pytest.mark.parametrize(
    "answer",
    [
        _HEAD + _CHUNKED[:40],  # closed inside a chunk
        _HEAD + _CHUNKED[:-5],  # closed before the last chunk
        _HEAD + b"zz\r\n",  # a chunk size that is no number
        _HEAD + b"5\r\nabcdeXY",  # no CRLF after the chunk's data
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # fewer bytes than announced
    ],
    ids=["mid-chunk", "no-last-chunk", "bad-size", "no-crlf", "short-length"],
)
def test_an_answer_that_ends_early_or_breaks_its_framing_raises(answer: bytes) -> None:
    _reading_raises(answer, EngineBodyEnded)


def _reading_raises(answer: bytes, error: type[Exception], timeout_s: float = 30, hold_open: bool = False) -> None:
    """The engine writes ``answer``, then closes (or holds the connection open): reading the body raises ``error``."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answer)
        await writer.drain()
        if hold_open:
            await reader.read(1)  # until the client closes
        else:
            writer.close()

    async def client(pool: EnginePool, origin: str) -> None:
        response = await pool.post(origin, "/v1/x", b"{}", {}, timeout_s)
        with pytest.raises(error):
            await _pull_all(response)
        response.close()

    _run(script, client)


def test_a_connection_closed_before_the_head_raises_from_post() -> None:
    async def script(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def client(pool: EnginePool, origin: str) -> None:
        with pytest.raises(EngineBodyEnded):
            await pool.post(origin, "/v1/x", b"{}", {}, 30)

    _run(script, client)


def test_an_answer_past_the_request_timeout_raises_timeout() -> None:
    _reading_raises(_HEAD + _CHUNKED[:30], TimeoutError, timeout_s=0.5, hold_open=True)


def test_a_header_with_a_line_break_is_never_sent() -> None:
    async def script(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise AssertionError("no request may reach the engine")

    async def client(pool: EnginePool, origin: str) -> None:
        with pytest.raises(ValueError, match="line break"):
            await pool.post(origin, "/v1/x", b"{}", {"User-Agent": "a\r\nX-Injected: 1"}, 30)

    assert _run(script, client) == []


def test_pushed_payloads_pause_the_engine_socket_until_resumed() -> None:
    """A sink that asks to pause stops the reads: nothing more is pushed until resume(); then the rest is."""
    answer = _HEAD + _CHUNKED

    async def script(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(0, len(answer), 9):
            writer.write(answer[i : i + 9])
            await writer.drain()
            await asyncio.sleep(0.001)

    async def client(pool: EnginePool, origin: str) -> None:
        response = await pool.post(origin, "/v1/x", b"{}", {}, 30)
        got: list[bytes] = []

        def sink(data: bytes, _: float) -> bool:
            got.append(data)
            return True  # pause after every push

        response.push(sink)
        wakes = 0
        while await response.pushed():
            wakes += 1
            before = len(got)
            await asyncio.sleep(0.01)
            assert len(got) == before  # paused: nothing was pushed while the relay "drained"
            response.resume()
        assert b"".join(got) == b"".join(_EVENTS) and len(got) > 1 and wakes >= len(got) - 1
        response.release()

    _run(script, client)


def test_a_stream_quiet_past_its_idle_timeout_raises_idle_and_closes() -> None:
    first = b"%x\r\n%b\r\n" % (len(_EVENTS[0]), _EVENTS[0])
    closed: list[bool] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD + first)
        await writer.drain()
        closed.append(await reader.read(1) == b"")  # then silence, until the client closes the connection

    async def client(pool: EnginePool, origin: str) -> None:
        response = await pool.post(origin, "/v1/x", b"{}", {}, 30, idle_s=0.3)
        assert await response.read() == _EVENTS[0]
        with pytest.raises(EngineStreamIdle):
            await response.read()
        response.close()
        for _ in range(500):
            if closed:
                break
            await asyncio.sleep(0.01)

    _run(script, client)
    assert closed == [True]  # the engine saw its connection closed: it aborts the request


def test_time_the_gateway_paused_reading_is_not_the_engines_silence() -> None:
    """While the client is slow the engine's socket is not read; that pause never counts as the engine idle."""
    first = b"%x\r\n%b\r\n" % (len(_EVENTS[0]), _EVENTS[0])
    paused = asyncio.Event()

    async def script(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_HEAD + first)
        await writer.drain()
        await paused.wait()
        writer.write(_CHUNKED[len(first) :])  # it waits in the socket while the reader is paused
        await writer.drain()

    async def client(pool: EnginePool, origin: str) -> None:
        response = await pool.post(origin, "/v1/x", b"{}", {}, 30, idle_s=1.0)
        got: list[bytes] = []

        def sink(data: bytes, _: float) -> bool:
            got.append(data)
            return True  # pause after every push

        response.push(sink)
        assert await response.pushed() is True
        paused.set()
        await asyncio.sleep(2.5)  # paused far longer than the idle timeout
        response.resume()
        while await response.pushed():
            response.resume()
        assert b"".join(got) == b"".join(_EVENTS)
        response.release()

    _run(script, client)
