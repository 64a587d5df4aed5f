"""The daemon's management API: aiohttp on a 0600 unix socket, every request bearing the daemon token.

Routes (JSON in, JSON out, ``schema_version`` on every answer; errors are ``{"error": HitchError.to_dict()}``
with the table's HTTP status):

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
- ``POST /v1/shutdown`` — drain and stop every service, then exit.

The token is compared in constant time; a wrong or missing one is 401 and nothing else happens.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from harness.daemon.core import DaemonCore, lease_json
from harness.daemon.prepare import PrepareRequest, device_choice_of, prepare
from harness.daemon.runs import RunService, run_routes
from harness.errors import HitchError
from harness.lock import load_sealed_lock, validate_lock
from harness.service.starter_supervisor import EngineChoice

__all__ = ["API_SCHEMA_VERSION", "build_app"]

API_SCHEMA_VERSION = "1"
_log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(payload: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response({"schema_version": API_SCHEMA_VERSION, **payload}, status=status)


def _error(err: HitchError) -> web.Response:
    return _json({"error": err.to_dict()}, status=err.spec.http_status)


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        data = await request.json()
    except (ValueError, json.JSONDecodeError) as exc:
        raise HitchError("usage_error", "the request body is not JSON", {}) from exc
    if not isinstance(data, dict):
        raise HitchError("usage_error", "the request body must be a JSON object", {})
    return data


def _choice(body: dict[str, Any]) -> EngineChoice:
    engine = body.get("engine", "sglang")
    launcher = body.get("launcher", "process")
    if engine not in ("sglang", "fake") or launcher not in ("process", "oci"):
        raise HitchError(
            "usage_error", "engine is sglang|fake and launcher process|oci", {"engine": engine, "launcher": launcher}
        )
    flags = body.get("fake_flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise HitchError("usage_error", "fake_flags is a list of strings", {})
    image = body.get("image")
    return EngineChoice(engine, launcher, image if isinstance(image, str) else None, tuple(flags))


def build_app(core: DaemonCore, token: str, shutdown: Callable[[bool], None], runs: RunService | None = None) -> web.Application:
    expected = token.encode()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        presented = given[7:].encode() if given.startswith("Bearer ") else b""
        if not hmac.compare_digest(presented, expected):
            return _error(HitchError("inference_token_invalid", "a valid daemon token is required", {}))
        try:
            return await handler(request)
        except HitchError as err:
            return _error(err)
        except web.HTTPException:
            raise
        except Exception as exc:
            _log.exception("daemon request %s failed", request.path)
            return _error(HitchError("internal_error", f"the daemon failed: {type(exc).__name__}", {}))

    routes = web.RouteTableDef()

    @routes.get("/v1/status")
    async def status(_: web.Request) -> web.Response:
        return _json({"kind": "daemon-status", **core.status()})

    @routes.get("/v1/services")
    async def services(_: web.Request) -> web.Response:
        return _json({"kind": "services", "services": core.services(), "quarantined": core.quarantined()})

    @routes.post("/v1/services/{service_id}/stop")
    async def stop(request: web.Request) -> web.Response:
        body = await _body(request)
        sid = request.match_info["service_id"]
        stopped = await core.stop_service(sid, force=bool(body.get("force", False)))
        return _json({"kind": "service-stop", "service_id": sid, "stopped": stopped})

    @routes.post("/v1/services/{service_id}/unquarantine")
    async def unquarantine(request: web.Request) -> web.Response:
        sid = request.match_info["service_id"]
        return _json({"kind": "service-unquarantine", "service_id": sid, "cleared": core.unquarantine(sid)})

    @routes.post("/v1/acquire")
    async def acquire(request: web.Request) -> web.Response:
        body = await _body(request)
        owner = body.get("owner")
        if not isinstance(owner, str) or not owner:
            raise HitchError("usage_error", "owner is required", {})
        inference_id = str(body.get("inference_id", ""))
        lock = validate_lock(body["lock"]) if "lock" in body else load_sealed_lock(core.root, inference_id)
        scope = body.get("cache_scope_owner")
        lease = await core.acquire(lock, owner, _choice(body), scope if isinstance(scope, str) else None)
        return _json({"kind": "lease", **lease_json(lease)})

    @routes.post("/v1/release")
    async def release(request: web.Request) -> web.Response:
        body = await _body(request)
        lease_id = str(body.get("lease_id", ""))
        return _json({"kind": "release", "lease_id": lease_id, "released": await core.release(lease_id)})

    @routes.post("/v1/prepare")
    async def prepare_route(request: web.Request) -> web.Response:
        body = await _body(request)
        device, profile = body.get("device", "cpu"), body.get("profile", "baseline")
        if device not in ("cpu", "cuda") or profile not in ("baseline", "throughput"):
            raise HitchError("usage_error", "device is cpu|cuda and profile baseline|throughput", {})
        context = body.get("context_tokens")
        req = PrepareRequest(
            model=str(body.get("model", "")),
            device=device,
            profile=profile,
            runtime=str(body.get("runtime", "")),
            choice=_choice(body),
            context_tokens=context if isinstance(context, int) else None,
            device_choice=device_choice_of(body),
        )
        return _json({"kind": "inference-prepare", **await prepare(core, req)})

    @routes.post("/v1/shutdown")
    async def shutdown_route(request: web.Request) -> web.Response:
        body = await _body(request)
        asyncio.get_running_loop().call_soon(shutdown, bool(body.get("force", True)))
        return _json({"kind": "daemon-shutdown", "accepted": True})

    app = web.Application(middlewares=[auth])
    app.add_routes(routes)
    if runs is not None:
        app.add_routes(run_routes(runs, _body, _choice, _json))
    return app
