"""The ``/v1/runs`` routes of the daemon's management app: each parses its body and calls
:class:`harness.daemon.runs.RunService`.

Owns :func:`run_routes`: ``POST /v1/runs`` (create), ``GET /v1/runs`` (the live runs), ``GET /v1/runs/{id}`` (a
record), ``POST /v1/runs/{id}/finish``, ``POST /v1/runs/{id}/cancel`` and ``DELETE /v1/runs/{id}``.
"""

from __future__ import annotations

from aiohttp import web

from harness.app.requests import EmptyRequest, FinishRunRequest, RunRequest
from harness.daemon.replies import body_of, reply
from harness.daemon.runs import RunService
from harness.errors import HitchError

__all__ = ["run_routes"]


def run_routes(runs: RunService) -> web.RouteTableDef:
    """The ``/v1/runs`` routes of the daemon's management app."""
    routes = web.RouteTableDef()

    @routes.post("/v1/runs")
    async def create(request: web.Request) -> web.Response:
        return reply({"kind": "run", **await runs.create(await body_of(request, RunRequest))})

    @routes.get("/v1/runs")
    async def listing(_: web.Request) -> web.Response:
        return reply({"kind": "runs", "runs": runs.view()})

    @routes.delete("/v1/runs/{run_id}")
    async def delete(request: web.Request) -> web.Response:
        return reply({"kind": "run-delete", **await runs.delete(request.match_info["run_id"])})

    @routes.get("/v1/runs/{run_id}")
    async def show(request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        record = runs.store.read(run_id)
        if record is None:
            raise HitchError("run_not_found", f"no run {run_id!r} in this root", {"run_id": run_id})
        return reply({"kind": "run-record", "run_id": run_id, "record": record.to_json_dict()})

    @routes.post("/v1/runs/{run_id}/finish")
    async def finish(request: web.Request) -> web.Response:
        ask = await body_of(request, FinishRunRequest)
        err = None
        if ask.status != "completed" and ask.error is not None:  # the request's validator requires it
            err = HitchError(ask.error.code, ask.error.message[:2000], {})
        return reply({"kind": "run-finish", **await runs.finish(request.match_info["run_id"], ask.status, err)})

    @routes.post("/v1/runs/{run_id}/cancel")
    async def cancel(request: web.Request) -> web.Response:
        await body_of(request, EmptyRequest)
        return reply({"kind": "run-cancel", **await runs.cancel(request.match_info["run_id"])})

    return routes
