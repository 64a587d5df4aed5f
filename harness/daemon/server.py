"""The daemon's management API: aiohttp on a 0600 unix socket, every request bearing the daemon token.

Routes (JSON in, JSON out, ``schema_version`` on every answer; errors are ``{"error": HitchError.to_dict()}``
with the table's HTTP status). Every body is validated by its model of :mod:`harness.app.requests` before the
route acts: an unknown or mistyped field is a ``usage_error`` and nothing happens.

- ``GET  /v1/handshake`` — API version, capabilities and the code this daemon runs (:mod:`harness.handshake`);
- ``GET  /v1/status`` — pid, root, services, quarantined services, what recovery did;
- ``GET  /v1/services`` — the live services (state, epoch, leases, inference_id; no secrets);
- ``POST /v1/services/{service_id}/stop`` ``{"force": bool}`` — ``inference_in_use`` with live leases
  unless forced; ``POST /v1/services/{service_id}/unquarantine`` — the operator's explicit action;
- ``POST /v1/acquire`` ``{"inference_id" | "lock", "owner", "engine", "launcher", ...}`` → a lease
  (base URL, wire model, the *path* of the engine key file); ``POST /v1/release`` ``{"lease_id"}``;
- ``POST /v1/prepare`` — see :mod:`harness.daemon.prepare`;
- ``POST /v1/runs``, ``GET /v1/runs``, ``GET /v1/runs/{run_id}``, ``POST /v1/runs/{run_id}/finish``,
  ``POST /v1/runs/{run_id}/cancel``, ``DELETE /v1/runs/{run_id}`` — durable runs on the daemon's gateway
  (:mod:`harness.daemon.runs`);
- ``GET  /v1/progress/{key}`` — what the acquire shown under ``key`` (a run id) waits for now: queued behind
  whom, the engine starting (elapsed, its log's path and last line), ready (:meth:`DaemonCore.progress`);
- ``POST /v1/shutdown`` ``{"force", "drain_timeout_s"}`` — stop every service, then exit. Without ``force`` it
  drains: live leases end first (waited for up to ``drain_timeout_s``), or it is refused with
  ``inference_in_use``; with ``force`` each live run ends ``cancelled`` (``operator_stop``) before its lease.
  ``POST /v1/services/{id}/stop`` with ``force`` ends that service's runs the same way.

The token is compared in constant time; a wrong or missing one is 401 and nothing else happens.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from harness.app.requests import (
    AcquireRequest,
    EmptyRequest,
    PrepareRequest,
    ReleaseRequest,
    ShutdownRequest,
    StopServiceRequest,
)
from harness.daemon.caller import caller_of
from harness.daemon.core import DaemonCore, lease_json
from harness.daemon.prepare import prepare_for
from harness.daemon.replies import body_of, error_reply, reply
from harness.daemon.run_routes import run_routes
from harness.daemon.runs import RunService
from harness.errors import HitchError
from harness.handshake import HANDSHAKE_PATH, handshake_answer
from harness.lock import load_sealed_lock, validate_lock

__all__ = ["build_app"]

_log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(
    core: DaemonCore, token: str, shutdown: Callable[[bool, str | None], None], runs: RunService | None = None
) -> web.Application:
    expected = token.encode()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        presented = given[7:].encode() if given.startswith("Bearer ") else b""
        if not hmac.compare_digest(presented, expected):
            return error_reply(HitchError("inference_token_invalid", "a valid daemon token is required", {}))
        try:
            return await handler(request)
        except HitchError as err:
            return error_reply(err)
        except web.HTTPException:
            raise
        except Exception as exc:
            _log.exception("daemon request %s failed", request.path)
            return error_reply(HitchError("internal_error", f"the daemon failed: {type(exc).__name__}", {}))

    routes = web.RouteTableDef()

    @routes.get(HANDSHAKE_PATH)
    async def handshake(_: web.Request) -> web.Response:
        return reply({"kind": "daemon-handshake", **handshake_answer()})

    @routes.get("/v1/status")
    async def status(_: web.Request) -> web.Response:
        # the gateway's Prometheus endpoint (its own loopback port): queue, permits, abort verdicts awaited
        gateway = {} if runs is None else {"gateway": {"metrics_url": runs.gateway.metrics_url}}
        return reply({"kind": "daemon-status", **core.status(), **gateway})

    @routes.get("/v1/services")
    async def services(_: web.Request) -> web.Response:
        return reply({"kind": "services", "services": core.services(), "quarantined": core.quarantined()})

    @routes.get("/v1/progress/{key}")
    async def progress(request: web.Request) -> web.Response:
        return reply({"kind": "progress", "key": request.match_info["key"], **core.progress(request.match_info["key"])})

    @routes.post("/v1/services/{service_id}/stop")
    async def stop(request: web.Request) -> web.Response:
        ask = await body_of(request, StopServiceRequest)
        sid = request.match_info["service_id"]
        ended: list[str] = []
        if ask.force and runs is not None:  # each run's terminal record before its binding and lease go
            ended = await runs.end_for_operator(sid, caller_of(request, ask.by))
        stopped = await core.stop_service(sid, force=ask.force)
        return reply({"kind": "service-stop", "service_id": sid, "stopped": stopped, "runs_ended": ended})

    @routes.post("/v1/services/{service_id}/unquarantine")
    async def unquarantine(request: web.Request) -> web.Response:
        await body_of(request, EmptyRequest)
        sid = request.match_info["service_id"]
        return reply({"kind": "service-unquarantine", "service_id": sid, "cleared": core.unquarantine(sid)})

    @routes.post("/v1/acquire")
    async def acquire(request: web.Request) -> web.Response:
        ask = await body_of(request, AcquireRequest)
        lock = validate_lock(ask.lock) if ask.lock is not None else load_sealed_lock(core.root, ask.inference_id or "")
        lease = await core.acquire(lock, ask.owner, ask.engine_choice(), ask.cache_scope_owner)
        return reply({"kind": "lease", **lease_json(lease)})

    @routes.post("/v1/release")
    async def release(request: web.Request) -> web.Response:
        ask = await body_of(request, ReleaseRequest)
        return reply({"kind": "release", "lease_id": ask.lease_id, "released": await core.release(ask.lease_id)})

    @routes.post("/v1/prepare")
    async def prepare_route(request: web.Request) -> web.Response:
        ask = await body_of(request, PrepareRequest)
        result, _ = await prepare_for(core, ask, progress=ask.progress_key)
        return reply({"kind": "inference-prepare", **result})

    @routes.post("/v1/shutdown")
    async def shutdown_route(request: web.Request) -> web.Response:
        ask = await body_of(request, ShutdownRequest)
        if not ask.force:  # a normal stop drains: live leases end first (or the stop is refused)
            await core.drained(ask.drain_timeout_s)
        asyncio.get_running_loop().call_soon(shutdown, ask.force, caller_of(request, ask.by) if ask.force else None)
        return reply({"kind": "daemon-shutdown", "accepted": True})

    app = web.Application(middlewares=[auth])
    app.add_routes(routes)
    if runs is not None:
        app.add_routes(run_routes(runs))
    return app
