"""LocalModelGateway: the aiohttp app, its request pipeline, and its lifecycle (spec §10.2, DESIGN §5).

Owns :class:`Gateway` (its :class:`GatewayConfig`: :mod:`gateway.config`). One request goes through, in order:
allow-list (404, nothing reaches the engine) → run token and binding state (401/403) → ``GET /v1/models``
answered here with the binding's wire model only → the run's deadline (when it has one) → the body read,
checked and translated (:func:`gateway.policy.apply_policy`: parse → shape → lock → engine) → exact context
check → fair admission (the gateway's own bounded FIFO: one permit per engine running slot, per-run
round-robin, the lock's queue timeout or the deadline's time left) → one POST to the engine under min(the
deadline's time left, the lock's request timeout) and, for a stream, the lock's idle timeout, relayed byte for
byte → one evidence row, metrics and capture. The upstream client never reads the environment, keeps no
cookies and never retries.

No faked cancel (spec §9.2): a request the gateway abandoned after forwarding it (the client left, a timeout)
keeps its permit until the engine shows the slot free; an engine that never does faults the service epoch
(:mod:`gateway.aborts`; the daemon's hook is ``Gateway.aborts.on_service_fault``). Deadlines and timeouts per
request: :mod:`gateway.deadlines`.

Every connection is held to the HTTP layer's bounds first (:mod:`gateway.connections`: head, body and idle
timeouts, a cap on open connections, singleton headers). The gateway binds loopback by default; metrics are
served on a second loopback port. A container-facing
listener (:meth:`Gateway.listen_on`, the Docker bridge address of hitch's eval network) serves only the
bindings registered for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from gateway.aborts import AbandonedRequests
from gateway.admission import FairQueue, Permit
from gateway.auth import bearer_token, engine_headers
from gateway.bindings import Binding, BindingRegistry, UpstreamTarget
from gateway.capture import CaptureLedger, RequestCapture, RunCapture
from gateway.capture_segments import CaptureSegments
from gateway.config import DEFAULT_MAX_WAITING, GatewayConfig
from gateway.connections import GatewayServer, HttpLimits, close_after, duplicated_header
from gateway.deadlines import admit, deadline_spent, set_timeout, stream_idle_s
from gateway.engine_http import EnginePool, EngineRelayStopped, EngineResponse
from gateway.evidence import EvidenceLog
from gateway.intake import body_limit, read_body
from gateway.metrics import GatewayMetrics, build_metrics_app
from gateway.policy import apply_policy
from gateway.replies import REQUEST_ID_HEADER, error_reply, hitch_error_reply, json_reply
from gateway.responses_completion import ResponsesCompletion
from gateway.routes import match_route, unsupported_route
from gateway.transport import Exchange, open_upstream, relay_stream, relay_unary
from gateway.writer import BackgroundWriter
from harness.contracts.binding import ModelEndpointBindingV1
from harness.errors import HitchError
from harness.paths import ensure_private_dir

__all__ = ["DEFAULT_MAX_WAITING", "Gateway", "GatewayConfig"]

log = logging.getLogger("gateway.server")

_OFFLOAD_BODY_BYTES = 256 * 1024  # above this the context check runs in a worker thread
_CLIENT_CLOSED = 499
_READ_CAP = 1 << 30  # aiohttp's own cap; unused, since bodies are read by gateway.intake.read_body


class Gateway:
    """One gateway: bindings, admission queues, the upstream pool, evidence and metrics."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        ensure_private_dir(config.state_dir)
        self.registry = BindingRegistry(config.private_dir, f"http://{config.host}:{config.port}")
        self.metrics = GatewayMetrics()
        self.ledger = CaptureLedger()
        self.writer = BackgroundWriter()
        self.evidence = EvidenceLog(config.evidence_dir, self.writer)
        self.segments: dict[str, CaptureSegments] = {}  # per binding with a full capture (its files, their digests)
        self.queues: dict[tuple[str, int], FairQueue] = {}
        # exchanges begun whose evidence row is not yet handed to the writer (a client can read a reply's
        # last byte before its handler records it; readers of evidence wait for this to reach 0)
        self.unrecorded = 0
        # per binding: exchanges begun (each one must end as exactly one evidence row) and handlers in flight
        self.begun: dict[str, int] = {}
        self.in_flight: dict[str, set[asyncio.Task[Any]]] = {}
        self.streams: dict[str, dict[EngineResponse, asyncio.Task[Any]]] = {}  # streams relaying, per binding
        self.metrics.queue_gauges = self._queue_rows
        self._pool = EnginePool()
        # abandoned exchanges whose engine slot is being confirmed free (they hold their permit and their row)
        self.aborts = AbandonedRequests(self._pool, self._record_deferred, config.abort_confirm_timeout_ms)
        self._runner: web.ServerRunner | None = None
        self._metrics_runner: web.AppRunner | None = None
        self.port: int | None = None
        self.metrics_port: int | None = None
        # container-facing listeners (host -> site, origin): only bindings registered for one are served there
        self._extra_sites: dict[str, tuple[web.TCPSite, str]] = {}

    # -- management (called by the manager / daemon on the gateway's loop) --

    def register(
        self,
        run_id: str,
        target: UpstreamTarget,
        *,
        queue_timeout_ms: int | None = None,
        capture: RunCapture | None = None,
        listen_host: str | None = None,
        deadline_s: float | None = None,
    ) -> ModelEndpointBindingV1:
        """Bind a run; ``capture`` replaces the gateway's capture for this run only; ``listen_host`` makes it a
        container-facing binding, served only on that listener (:meth:`listen_on` first); ``deadline_s`` is
        the run's candidate deadline (:meth:`gateway.bindings.Binding.time_left`)."""
        timeout = queue_timeout_ms if queue_timeout_ms is not None else self.config.queue_timeout_ms
        listener = None
        if listen_host is not None:
            known = self._extra_sites.get(listen_host)
            if known is None:
                raise HitchError("internal_error", f"the gateway does not listen on {listen_host}", {})
            listener = (listen_host, known[1])
        return self.registry.register(run_id, target, timeout, capture, listener, deadline_s)

    async def listen_on(self, host: str) -> str:
        """Also accept connections on ``host`` (the Docker bridge address eval containers reach); returns that
        listener's origin. A binding registered with this origin is served only there, and nothing else is.
        A host this machine cannot bind (remote or rootless Docker) is ``local_inference_topology_unsupported``."""
        known = self._extra_sites.get(host)
        if known is not None:
            return known[1]
        if self._runner is None:
            raise HitchError("internal_error", "the gateway is not started", {})
        before = set(self._runner.addresses)
        site = web.TCPSite(self._runner, host, 0, backlog=1024)
        try:
            await site.start()
        except OSError as exc:
            raise HitchError(
                "local_inference_topology_unsupported",
                f"the gateway cannot listen on the container-facing address {host}: {exc.strerror or exc}",
                {"host": host},
            ) from exc
        ports = [int(a[1]) for a in self._runner.addresses if a not in before and isinstance(a, tuple) and len(a) >= 2]
        origin = f"http://{_url_host(host)}:{ports[0]}"
        self._extra_sites[host] = (site, origin)
        return origin

    async def stop_listening(self, host: str) -> None:
        """Close a container-facing listener (its bindings are unreachable from then on)."""
        known = self._extra_sites.pop(host, None)
        if known is not None:
            await known[0].stop()

    def abort(self, binding_id: str, error: HitchError | None = None) -> int:
        """Revoke the binding and end its requests in flight (a cancelled run); returns how many. With ``error``
        (an operator's stop) a stream already relaying ends with that error as its terminal event, never a
        silent cut; the other requests are cancelled."""
        self.registry.revoke(binding_id)
        ended: set[asyncio.Task[Any]] = set()
        if error is not None:
            for upstream, task in list(self.streams.get(binding_id, {}).items()):
                upstream.stop(EngineRelayStopped(error))
                ended.add(task)
        tasks = list(self.in_flight.get(binding_id, ()))
        for task in tasks:
            if task not in ended:
                task.cancel()
        return len(tasks)

    def revoke(self, binding_id: str) -> ModelEndpointBindingV1:
        return self.registry.revoke(binding_id)

    def seal(self, binding_id: str) -> ModelEndpointBindingV1:
        return self.registry.seal(binding_id)

    @property
    def open_connections(self) -> int:
        """Client connections open now (all listeners), refused ones not counted."""
        server = self._runner.server if self._runner is not None else None
        return server.open_connections if isinstance(server, GatewayServer) else 0

    @property
    def base_url(self) -> str:
        return self.registry.origin

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://{self.config.host}:{self.metrics_port}/metrics"

    def _make_request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        loop = asyncio.get_running_loop()
        return web.BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=_READ_CAP)

    async def start(self) -> None:
        # aiohttp's low-level server: the allow-list is the router, so no Application, router or middleware
        # runs per request.
        cfg = self.config
        limits = HttpLimits(cfg.header_timeout_s, cfg.body_timeout_s, cfg.idle_timeout_s, cfg.max_connections)
        server = GatewayServer(
            self._serve,
            limits=limits,
            on_refusal=self._count_refusal,
            request_factory=self._make_request,
            handler_cancellation=True,
            access_log=None,
        )
        self._runner = web.ServerRunner(server)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, backlog=1024)
        await site.start()
        self.port = _bound_port(self._runner)
        self.registry.set_origin(f"http://{_url_host(self.config.host)}:{self.port}")
        if self.config.metrics_port is not None:
            self._metrics_runner = web.AppRunner(build_metrics_app(self.metrics), access_log=None)
            await self._metrics_runner.setup()
            await web.TCPSite(self._metrics_runner, "127.0.0.1", self.config.metrics_port).start()
            self.metrics_port = _bound_port(self._metrics_runner)

    async def stop(self) -> None:
        await self.aborts.cancel()
        self._extra_sites.clear()  # the runner's cleanup stops every site
        if self._runner is not None:
            await self._runner.cleanup()
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
        self._pool.close()
        self.evidence.flush()
        await asyncio.to_thread(self.writer.flush)

    async def settle_evidence(self, timeout_s: float = 30.0, binding_id: str | None = None) -> None:
        """Every exchange begun so far (of one binding, when given) is on disk: wait for handlers still
        recording, then flush."""
        deadline = time.monotonic() + timeout_s

        def busy() -> bool:
            if binding_id is not None:
                return bool(self.in_flight.get(binding_id)) or bool(self.aborts.pending(binding_id))
            return bool(self.unrecorded)

        while busy() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        # an abandoned exchange's row waits for its engine slot's verdict, which its own bound ends
        confirming = self.aborts.pending(binding_id)
        if confirming:
            await asyncio.wait(confirming)
        self.evidence.flush()
        await asyncio.to_thread(self.writer.flush)

    # -- the request pipeline --

    def _queue_for(self, target: UpstreamTarget) -> FairQueue:
        key = (target.service_id, target.epoch)
        queue = self.queues.get(key)
        if queue is None:
            # the gateway's bound, not the lock's max_queued_requests (the engine's queue, behind this one)
            queue = self.queues[key] = FairQueue(target.lock.execution.max_running_requests, self.config.max_waiting)
        return queue

    def _queue_rows(self) -> list[tuple[str, int, int, int, int, int, int]]:
        rows = []
        for (sid, epoch), q in self.queues.items():
            confirming = self.aborts.by_service[(sid, epoch)]  # abandoned, their slot's verdict still awaited
            rows.append((f"{sid}#{epoch}", q.in_use, q.waiting, q.acquired, q.released, q.repeat_releases, confirming))
        return rows

    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        """The last resort: no exception reaches aiohttp's default handler (its bare 500 text)."""
        try:
            return await self._handle(request)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except HitchError as exc:
            return hitch_error_reply(exc)
        except Exception as exc:
            return self._internal_error(request, exc, os.urandom(12).hex())

    def _count_refusal(self, code: str) -> None:
        self.metrics.refusals[code] += 1

    def _internal_error(self, request: web.BaseRequest, exc: BaseException, request_id: str) -> web.StreamResponse:
        self.metrics.refusals["internal_error"] += 1
        log.error("internal error answering request %s", request_id, exc_info=exc)
        if request.writer is not None and request.writer.output_size > 0:
            transport = request.transport
            if transport is not None:
                transport.close()  # mid-reply: the client must see a broken reply, never a clean end
            raise ConnectionResetError("internal error after the reply began") from exc
        return error_reply("internal_error", "the gateway failed on this request; see its log", request_id)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        t0 = time.perf_counter()
        duplicated = duplicated_header(request.headers)
        if duplicated is not None:  # an ambiguous credential or framing: refused, never resolved by taking one
            self.metrics.refusals["inference_header_duplicated"] += 1
            refused = error_reply("inference_header_duplicated", f"the request carries {duplicated} more than once")
            refused.force_close()
            return refused
        route = match_route(request.method, request.raw_path)
        if route is None:
            self.metrics.not_found += 1
            unsupported = unsupported_route(request.method, request.raw_path)
            if unsupported is not None:  # a Responses API route this server does not offer: said so
                return error_reply("inference_route_unsupported", unsupported)
            return error_reply("inference_route_unavailable", "no such route on this gateway")
        try:
            binding = self.registry.resolve(route.binding_id, bearer_token(request.headers.get("Authorization")))
            self._require_own_listener(request, binding)
        except HitchError as exc:
            self.metrics.refusals[exc.code] += 1
            return hitch_error_reply(exc)
        ex = Exchange(os.urandom(12).hex(), binding, route.name, t0)
        self.unrecorded += 1
        bid = binding.binding_id
        self.begun[bid] = self.begun.get(bid, 0) + 1
        task = asyncio.current_task()
        if task is not None:
            self.in_flight.setdefault(bid, set()).add(task)
        forwarded = False
        queue: FairQueue | None = None
        permit: Permit | None = None
        try:
            if route.name == "/v1/models":
                ex.status, ex.http_status = "completed", 200
                return self._models(ex)
            left = binding.time_left(time.monotonic())
            if left is not None:
                ex.deadline_left_ms = round(left * 1000, 3)  # microseconds: start + deadline - now is a float sum
                if left <= 0:
                    raise deadline_spent(binding, "before this request")
            target = binding.target
            context = target.lock.execution.context_tokens_per_request
            raw = await read_body(request, body_limit(context, self.config.max_body_bytes), self.config.body_timeout_s)
            prepared = apply_policy(route.name, raw, target.lock, target.wire_model)
            ex.stream, ex.max_output_tokens = prepared.stream, prepared.max_output_tokens
            ex.benchmark_controls = prepared.benchmark_controls
            if prepared.response_facts is not None:
                ex.completion = ResponsesCompletion(prepared.response_facts)
            checker = binding.checker
            args = (
                prepared.messages, prepared.tools, prepared.max_output_tokens, context, prepared.responses,
                prepared.template_kwargs,
            )  # fmt: skip
            if len(raw) > _OFFLOAD_BODY_BYTES:
                await asyncio.to_thread(checker.check, *args)
            else:
                checker.check(*args)
            queue = self._queue_for(target)
            permit = await admit(queue, binding)
            t_admit = time.perf_counter()
            ex.queue_ms = (t_admit - t0) * 1000
            ex.admitted_seq = permit.seq
            self.metrics.queue.observe(t_admit - t0)
            set_timeout(ex, binding)
            own = binding.capture
            mode = own.mode if own is not None else self.config.capture
            if mode != "off":
                limit = (own.limit_bytes if own is not None else None) or self.config.capture_limit_bytes
                ex.capture = RequestCapture(mode, limit)
                ex.capture.request(prepared.body)
            headers = engine_headers(request.headers, target.engine_key, json_body=True)
            forwarded = True
            queue.at_engine += 1
            ex.upstream_at = time.perf_counter()
            idle_s = stream_idle_s(target.lock) if prepared.stream else None
            upstream = await open_upstream(self._pool, ex, prepared.body, headers, idle_s)
            if prepared.stream and upstream.status == 200 and upstream.content_type == "text/event-stream":
                self.metrics.open_streams += 1
                live = self.streams.setdefault(bid, {})
                if task is not None:
                    live[upstream] = task
                try:
                    return await relay_stream(request, upstream, ex)
                finally:
                    self.metrics.open_streams -= 1
                    live.pop(upstream, None)
            return await relay_unary(upstream, ex, self.config.max_response_bytes)
        except HitchError as exc:
            ex.status = "failed" if forwarded else "rejected"
            ex.error_code, ex.http_status = exc.code, exc.spec.http_status
            self.metrics.refusals[exc.code] += 1
            if exc.code == "inference_request_timeout":  # a stalled body: answered, and the connection closed
                return await close_after(request, hitch_error_reply(exc, ex.request_id))
            return hitch_error_reply(exc, ex.request_id)
        except (asyncio.CancelledError, ConnectionResetError):
            if not ex.settled:
                ex.status = "cancelled"
            if not ex.http_status:
                ex.http_status = _CLIENT_CLOSED
            raise
        except Exception as exc:
            ex.status = "failed" if forwarded else "rejected"
            ex.error_code, ex.http_status = "internal_error", 500
            return self._internal_error(request, exc, ex.request_id)
        finally:
            if ex.ended_at is None:
                ex.ended_at = time.perf_counter()
            deferred = False
            try:
                if permit is not None and queue is not None:
                    if forwarded and ex.abandoned:  # the permit and the row wait for the engine's slot
                        self.aborts.confirm_later(ex, permit, queue)
                        deferred = True
                    else:
                        if forwarded:
                            queue.at_engine -= 1
                        permit.release()
            finally:
                try:
                    if not deferred:
                        self._record(ex)
                finally:
                    if not deferred:
                        self.unrecorded -= 1
                    if task is not None:
                        self.in_flight.get(bid, set()).discard(task)

    def _require_own_listener(self, request: web.BaseRequest, binding: Binding) -> None:
        """A container-facing binding answers only on its listener, and that listener serves nothing else:
        a token that leaks to the other side is refused like an unknown one."""
        if binding.listen_host is None and not self._extra_sites:
            return
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        local = str(sockname[0]) if isinstance(sockname, tuple) and sockname else None
        on_extra = local in self._extra_sites
        if (binding.listen_host is not None and local != binding.listen_host) or (binding.listen_host is None and on_extra):
            raise HitchError("inference_token_invalid", "missing or invalid run token", {})

    def _models(self, ex: Exchange) -> web.Response:
        rec, lock = ex.binding.record, ex.binding.target.lock
        card = {
            "id": rec.wire_model,
            "object": "model",
            "created": int(rec.created_at),
            "owned_by": "hitch",
            "root": rec.wire_model,
            "parent": None,
            "max_model_len": lock.execution.context_tokens_per_request,
        }
        return json_reply({"object": "list", "data": [card]}, headers={REQUEST_ID_HEADER: ex.request_id})

    def _record_deferred(self, ex: Exchange) -> None:
        """The row of an exchange whose handler ended before its engine slot's verdict."""
        try:
            self._record(ex)
        finally:
            self.unrecorded -= 1

    def _record(self, ex: Exchange) -> None:
        bid = ex.binding.binding_id
        self.evidence.write(bid, ex)
        ttft = None if ex.first_text_at is None else ex.first_text_at - ex.t0
        self.metrics.observe_request(ex.route, ex.status, (ex.ended_at or ex.t0) - ex.t0, ttft)
        if ex.capture is not None:
            segments = self.segments.get(bid)
            if segments is None and ex.capture.mode == "full":
                own = ex.binding.capture
                folder = own.directory if own is not None else self.config.capture_dir
                segments = self.segments[bid] = CaptureSegments(folder / bid, self.config.capture_segment_bytes)
            meta: dict[str, Any] = {
                "request_id": ex.request_id,
                "engine_rid": ex.engine_rid,
                "run_id": ex.binding.run_id,
                "route": ex.route,
                "status": ex.status,
                "http_status": ex.http_status,
            }
            ex.capture.publish(self.writer, self.ledger, segments, bid, meta)


def _bound_port(runner: web.BaseRunner) -> int:
    for addr in runner.addresses:
        if isinstance(addr, tuple) and len(addr) >= 2:
            return int(addr[1])
    raise RuntimeError("the gateway is not listening")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
