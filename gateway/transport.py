"""The hop to the engine and back: one POST, never retried, bytes relayed unmodified (spec §9.2, §10.2).

Owns :class:`Exchange` (what one physical request did, for the evidence row) and the relays:

- :func:`open_upstream` sends the policy's body with the engine headers over the gateway's keep-alive pool
  (:class:`gateway.engine_http.EnginePool`: no decompression, so the bytes are the engine's), under the
  exchange's timeout (the lock's request timeout, or less when the run's deadline ends first) and, for a
  stream, the lock's stream idle timeout. A connect failure is ``inference_process_exited`` when the engine no
  longer accepts connections. POSTs are never retried.
- :func:`relay_unary` reads the engine's JSON answer (bounded) and returns it byte for byte.
- :func:`relay_stream` relays each read of the engine's body to the client as it arrives, as one HTTP chunk in
  one socket write: the first with the response headers (``StreamResponse.write``), every later one from the
  engine socket's callback (:meth:`gateway.engine_answer.EngineResponse.push`: no coroutine per event). When
  the client's transport pauses writing, the engine's socket stops being read until the client drained
  (backpressure reaches the engine), while a :class:`gateway.sse.StreamObserver` watches on the side. If the
  engine's body ends early (crash, reset, partial event, missing final event) the client connection is
  closed without the chunked terminator, so the client sees a broken stream, never a clean end; the evidence
  says ``failed`` with ``inference_process_exited`` when the engine is gone, else ``inference_upstream_failed``.
  When the gateway itself ends a stream — the engine sent nothing for the lock's stream idle timeout
  (``inference_stream_idle_timeout``), or the run's deadline came (``inference_deadline_exceeded``) — the
  client gets a terminal error event in the API's own shape (:func:`gateway.replies.stream_error_event`) and
  a clean end, and the evidence row says which.

A client that goes away cancels the handler; the ``finally`` blocks close the upstream connection at once
(the engine aborts the request and frees its slot) and the permit is released by the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.http_writer import StreamWriter
from multidict import CIMultiDict

from gateway.bindings import Binding
from gateway.capture import RequestCapture
from gateway.engine_http import EngineBodyEnded, EnginePool, EngineRelayStopped, EngineResponse, EngineStreamIdle
from gateway.replies import OPENAI_CODES, REQUEST_ID_HEADER, SERVER_NAME, stream_error_event
from gateway.responses_completion import ResponsesCompletion
from gateway.routes import RouteName
from gateway.sse import Outcome, StreamObserver, Usage, unary_outcome
from harness.errors import HitchError

__all__ = ["Exchange", "engine_alive", "open_upstream", "relay_stream", "relay_unary"]

_PASS_HEADERS = ("Content-Type", "Cache-Control")
_TRUNCATED = ("partial event at close", "stream ended without its final event")
Status = Literal["completed", "incomplete", "failed", "cancelled", "rejected"]


@dataclass
class Exchange:
    """One physical request as the evidence row will describe it."""

    request_id: str
    binding: Binding
    route: RouteName
    t0: float
    stream: bool = False
    max_output_tokens: int | None = None
    queue_ms: float | None = None
    upstream_at: float | None = None  # the request leaves for the engine
    first_text_at: float | None = None  # the first text delta was read from the engine (and relayed at once)
    upstream_done_at: float | None = None  # the engine's answer was read to its end
    ended_at: float | None = None
    http_status: int = 0
    status: Status = "rejected"
    error_code: str | None = None
    engine_rid: str | None = None
    usage: Usage | None = None
    capture: RequestCapture | None = None
    detail: str | None = field(default=None, repr=False)
    benchmark_controls: dict[str, bool | int] | None = None
    tool_calls: int | None = None
    settled: bool = False  # the engine's answer reached its end (or its terminal event reached the client)
    engine_done: bool = False  # the engine finished this request (its body ended, or its terminal event was read)
    engine_gone: bool = False  # the engine no longer accepts connections (its process exited)
    engine_closed: bool = False  # the engine closed the connection itself, or never took the request
    timeout_s: float | None = None  # this request's timeout: the lock's request timeout or the deadline's time left
    deadline_left_ms: float | None = None  # the run's deadline left when the request arrived (None: no deadline)
    deadline_bound: bool = False  # the run's deadline, not the lock, set timeout_s
    admitted_seq: int | None = None  # the n-th admission of the service's queue
    abort_confirm_ms: float | None = None  # abandoned: from the engine connection's close to its slot shown free
    abort_outcome: str | None = None  # abandoned: free | unconfirmed | engine_gone (gateway.slot_probe.SlotVerdict)
    completion: ResponsesCompletion | None = None  # Responses: completes the answer to the Open Responses schema

    def apply(self, outcome: Outcome) -> None:
        self.settled = True
        self.status = outcome.status
        self.engine_rid = outcome.engine_rid
        self.usage = outcome.usage
        self.error_code = outcome.error_code
        self.detail = outcome.detail
        self.tool_calls = outcome.tool_calls

    def _since_upstream(self, at: float | None) -> float | None:
        return None if at is None or self.upstream_at is None else (at - self.upstream_at) * 1000

    def evidence_fields(self) -> dict[str, Any]:
        rec = self.binding.record
        u = self.usage or Usage()
        return {
            "request_id": self.request_id,
            "engine_rid": self.engine_rid,
            "run_id": rec.run_id,
            "inference_id": rec.inference_id,
            "epoch": rec.epoch,
            "route": self.route,
            "stream": self.stream,
            "queue_ms": self.queue_ms,
            "ttft_ms": None if self.first_text_at is None else (self.first_text_at - self.t0) * 1000,
            "e2e_ms": None if self.ended_at is None else (self.ended_at - self.t0) * 1000,
            "engine_ms": self._since_upstream(self.upstream_done_at),
            "engine_ttft_ms": self._since_upstream(self.first_text_at),
            "input_tokens": u.input_tokens,
            "cached_tokens": u.cached_tokens,
            "output_tokens": u.output_tokens,
            "reasoning_tokens": u.reasoning_tokens,
            "max_output_tokens": self.max_output_tokens,
            "status": self.status,
            "http_status": self.http_status,
            "error_code": self.error_code,
            "benchmark_controls": self.benchmark_controls,
            "tool_calls": self.tool_calls,
            "timeout_ms": None if self.timeout_s is None else self.timeout_s * 1000,
            "deadline_left_ms": self.deadline_left_ms,
            "admitted_seq": self.admitted_seq,
            "abort_confirm_ms": self.abort_confirm_ms,
            "abort_outcome": self.abort_outcome,
            "completed_fields": sorted(self.completion.filled) if self.completion and self.completion.relayed else None,
            **(self.capture.fields() if self.capture is not None else {}),  # metadata capture is the row
        }

    @property
    def abandoned(self) -> bool:
        """Forwarded, and the gateway closed the engine connection before the engine finished the request
        (the engine is asked to abort it; its slot must be shown free before the permit moves on)."""
        return self.upstream_at is not None and not (self.engine_done or self.engine_gone or self.engine_closed)

    def upstream_broke(self, exc: BaseException) -> None:
        """Note who ended the engine connection: the engine itself (it ended the request), or never reached."""
        if (isinstance(exc, EngineBodyEnded) and exc.by_engine) or (
            isinstance(exc, OSError) and not isinstance(exc, TimeoutError)
        ):
            self.engine_closed = True

    def timeout_code(self, fallback: str) -> str:
        """The code of a request timeout: the run's deadline, when it set the timeout."""
        return "inference_deadline_exceeded" if self.deadline_bound else fallback


async def engine_alive(base_url: str, timeout_s: float = 0.5) -> bool:
    """Does the engine still accept TCP connections? (A crashed process refuses them at once.)"""
    parts = urlsplit(base_url)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port), timeout_s)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _failure_code(base_url: str) -> str:
    """After an early end: ``inference_process_exited`` if the engine stopped accepting connections.

    A dying process can still hold its listening socket for a moment after our connection closed, so an
    engine that answers is asked twice, 100 ms apart (this runs only on failure paths)."""
    for attempt in range(2):
        if not await engine_alive(base_url):
            return "inference_process_exited"
        if attempt == 0:
            await asyncio.sleep(0.1)
    return "inference_upstream_failed"


async def open_upstream(
    pool: EnginePool, ex: Exchange, body: bytes, headers: dict[str, str], idle_s: float | None
) -> EngineResponse:
    target = ex.binding.target
    timeout_s = ex.timeout_s if ex.timeout_s is not None else target.lock.execution.request_timeout_ms / 1000
    try:
        return await pool.post(target.origin, ex.route, body, headers, timeout_s, idle_s)
    except EngineStreamIdle as exc:
        raise HitchError(
            "inference_stream_idle_timeout", str(exc), {"service_id": target.service_id, "stream_idle_timeout_ms": _ms(idle_s)}
        ) from exc
    except (EngineBodyEnded, OSError, TimeoutError) as exc:
        ex.upstream_broke(exc)
        code = await _failure_code(target.origin)
        ex.engine_gone = code == "inference_process_exited"
        if isinstance(exc, TimeoutError) and not ex.engine_gone:
            code = ex.timeout_code(code)
        raise HitchError(code, "the engine did not answer the request", {"service_id": target.service_id}) from exc


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _client_headers(upstream: EngineResponse, request_id: str) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    for name in _PASS_HEADERS:
        value = upstream.headers.get(name)
        if value is not None:
            headers[name] = value
    headers[REQUEST_ID_HEADER] = request_id
    headers["Server"] = SERVER_NAME  # never the engine's or aiohttp's, which name versions
    return headers


async def relay_unary(upstream: EngineResponse, ex: Exchange, max_bytes: int) -> web.Response:
    api: Literal["chat", "responses"] = "chat" if ex.route == "/v1/chat/completions" else "responses"
    chunks: list[bytes] = []
    total = 0
    clean = False
    try:
        while True:
            try:
                chunk = await upstream.read()
            except (EngineBodyEnded, TimeoutError) as exc:
                ex.upstream_broke(exc)
                code = await _failure_code(ex.binding.target.origin)
                ex.engine_gone = code == "inference_process_exited"
                if isinstance(exc, TimeoutError) and not ex.engine_gone:
                    code = ex.timeout_code(code)
                raise HitchError(code, "the engine's answer ended early", {}) from exc
            if not chunk:
                clean = ex.engine_done = True
                ex.upstream_done_at = upstream.ended_at
                break
            total += len(chunk)
            if total > max_bytes:
                raise HitchError("inference_upstream_failed", "the engine's answer is over the size limit", {"limit": max_bytes})
            chunks.append(chunk)
    finally:
        if clean:
            upstream.release()
        else:
            upstream.close()
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    ex.apply(unary_outcome(api, upstream.status, data))
    ex.http_status = upstream.status
    ex.ended_at = time.perf_counter()
    if ex.capture is not None:
        ex.capture.response(data)  # the engine's bytes
    if ex.completion is not None and upstream.status == 200:
        data = ex.completion.body(data)
    return web.Response(body=data, status=upstream.status, headers=_client_headers(upstream, ex.request_id))


def _write_chunk(transport: asyncio.Transport | None, chunk: bytes) -> None:
    """One upstream read as one HTTP chunk in one socket write: the framing ``StreamResponse.write`` produces,
    without its two coroutines per chunk. The caller awaits the drain only while the transport has paused
    writing (``StreamResponse.write`` drains every 64 KiB, which waits only when paused too)."""
    if transport is None or transport.is_closing():
        raise ConnectionResetError("the client went away")
    transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))


class _StreamResponse(web.StreamResponse):
    """Headers leave with the first relayed bytes (one write, one client wake-up), as ``web.Response`` does."""

    _send_headers_immediately = False


async def relay_stream(request: web.BaseRequest, upstream: EngineResponse, ex: Exchange) -> web.StreamResponse:
    api: Literal["chat", "responses"] = "chat" if ex.route == "/v1/chat/completions" else "responses"
    observer = StreamObserver(api)
    capture = ex.capture
    completion = ex.completion
    resp = _StreamResponse(status=upstream.status, headers=_client_headers(upstream, ex.request_id))
    ex.http_status = upstream.status
    clean = broken = sent = False
    ended_by: HitchError | None = None  # the gateway ends the stream itself: idle timeout, the run's deadline
    clock = time.perf_counter
    try:
        await resp.prepare(request)
        writer, protocol = request.writer, request.protocol
        # our own chunk framing only where aiohttp frames chunks too (the gateway never compresses; an HTTP/1.0
        # client gets a plain body until the connection closes: there, every read goes through resp.write)
        fast = isinstance(writer, StreamWriter) and writer.chunked
        try:
            while True:  # pulled: the first read (the headers leave with it), or all of them for HTTP/1.0
                try:
                    chunk = await upstream.read()
                except (EngineBodyEnded, TimeoutError, EngineStreamIdle, EngineRelayStopped) as exc:
                    ex.upstream_broke(exc)
                    ended_by = _gateway_end(exc, ex)
                    broken = ended_by is None  # the engine's body ended early
                    break
                if not chunk:
                    clean = ex.engine_done = True
                    ex.upstream_done_at = upstream.ended_at
                    break
                if capture is not None:
                    capture.response(chunk)  # the engine's bytes
                out = chunk if completion is None else completion.feed(chunk)
                if out:
                    await resp.write(out)
                    observer.feed(out, upstream.read_at)  # fed only once written (what it saw was relayed), with the read's time
                    sent = True
                if fast and sent:  # the headers left: later reads go straight to the socket
                    break
            if fast and not clean and not broken and ended_by is None:
                transport = request.transport

                def sink(chunk: bytes, now: float) -> bool:
                    if capture is not None:
                        capture.response(chunk)  # the engine's bytes
                    out = chunk if completion is None else completion.feed(chunk)
                    if out:
                        _write_chunk(transport, out)  # ConnectionResetError: the client went away
                        observer.feed(out, now)
                    return protocol.writing_paused  # the client reads slower than the engine writes

                upstream.push(sink)
                while True:
                    try:
                        paused = await upstream.pushed()
                    except (EngineBodyEnded, TimeoutError, EngineStreamIdle, EngineRelayStopped) as exc:
                        ex.upstream_broke(exc)
                        ended_by = _gateway_end(exc, ex)
                        break  # the engine's body ended early, or the gateway ends it
                    if not paused:
                        clean = ex.engine_done = True
                        ex.upstream_done_at = upstream.ended_at
                        break
                    await writer.drain()
                    upstream.resume()
        except (asyncio.CancelledError, ConnectionResetError):
            # The client went away. A client commonly closes as soon as it has read the terminal event, often
            # before the engine's body (or our chunked terminator) ended: that exchange completed, it was
            # not cancelled. Before the terminal event was relayed, it was cancelled (the caller records it).
            if observer.done:
                ex.apply(observer.terminal_outcome())
                ex.engine_done = True
                ex.ended_at = clock()
            else:
                ex.engine_rid, ex.usage = observer.engine_rid, observer.usage
            raise
        tail = b"" if completion is None else completion.flush()
        if tail:  # an event held for its end when the engine's body ended: relayed as the engine sent it
            await resp.write(tail)
            observer.feed(tail, clock())
        if ended_by is not None:
            if observer.done:  # the engine's terminal event was relayed before it went quiet: that stands
                ended_by = None
                ex.engine_done = True
                outcome = observer.terminal_outcome()
            else:
                if completion is not None:
                    wire = OPENAI_CODES.get(ended_by.code, ended_by.code)
                    event = completion.failed_event(wire, ended_by.message, observer.engine_rid)
                else:
                    event = stream_error_event(api, ended_by.code, ended_by.message, observer.engine_rid)
                await resp.write(event)
                if capture is not None:
                    capture.response(event)
                outcome = Outcome("failed", observer.engine_rid, observer.usage, ended_by.code, ended_by.message)
            truncated = False
        else:
            outcome = observer.finish()
            truncated = not clean or outcome.detail in _TRUNCATED
            if truncated:
                detail = outcome.detail if clean else "the engine's body ended early"
                code = await _failure_code(ex.binding.target.origin)
                ex.engine_gone = code == "inference_process_exited"
                outcome = Outcome("failed", outcome.engine_rid, outcome.usage, code, detail)
        ex.apply(outcome)
        ex.ended_at = clock()
        if truncated:
            transport = request.transport
            if transport is not None:
                transport.close()  # no chunked terminator: the client must see a broken stream, never a clean end
        else:
            await resp.write_eof()
    finally:
        ex.first_text_at = observer.first_text_at
        if clean:
            upstream.release()
        else:
            upstream.close()  # closes the engine connection: the engine aborts the request
    return resp


def _gateway_end(exc: BaseException, ex: Exchange) -> HitchError | None:
    """The error a stream is ended with by the gateway itself, or None when the engine's body broke (or the
    lock's request timeout ended it: a broken stream, as before any deadline existed)."""
    if isinstance(exc, EngineStreamIdle):
        return HitchError("inference_stream_idle_timeout", str(exc), {})
    if isinstance(exc, EngineRelayStopped):
        return exc.error
    if isinstance(exc, TimeoutError) and ex.deadline_bound:
        return HitchError("inference_deadline_exceeded", "the run's deadline came while the engine was answering", {})
    return None
