"""Every body route of the daemon's API validates its body with its model of ``harness.app.requests``: an unknown
field, a value of the wrong type or out of range, or a body that is not a JSON object is ``usage_error`` (HTTP
400) naming the field, and the route does nothing. A valid body of the same route gets past the check (its
answer is the route's own), so the refusal is the validation's and not the route's.

The daemon's app is served in-process on a loopback port (``aiohttp.test_utils``); nothing starts an engine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from harness.daemon.core import DaemonConfig, DaemonCore
from harness.daemon.runs import RunService
from harness.daemon.server import build_app
from harness.errors import ERROR_TABLE
from harness.paths import HitchRoot

TOKEN = "t" * 64
SHA = "sha256:" + "a" * 64
RUN = {"model": "local/tiny", "runtime": "sglang-0.5.23-cpu-generic"}

# route, a valid body, an unknown field added to it, and a field given a value of the wrong type or range
REFUSED: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    ("/v1/services/svc-x/stop", {"force": True}, "now", {"force": "yes"}),
    ("/v1/services/svc-x/unquarantine", {}, "why", {}),
    ("/v1/acquire", {"owner": "o", "inference_id": SHA}, "colour", {"owner": 5}),
    ("/v1/release", {"lease_id": "l-1"}, "force", {"lease_id": 7}),
    ("/v1/prepare", RUN, "colour", {"context_tokens": "4096"}),
    ("/v1/shutdown", {"force": True}, "now", {"force": 1}),
    ("/v1/runs", RUN, "colour", {"capture_max_bytes": "10"}),
    ("/v1/runs/r-1/finish", {"status": "completed"}, "extra", {"status": "done"}),
    ("/v1/runs/r-1/cancel", {}, "reason", {}),
]
# route and a valid body: its answer is the route's own (never a usage_error)
ACCEPTED: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/services/svc-x/stop", {"force": False}, "kind"),
    ("/v1/services/svc-x/unquarantine", {}, "kind"),
    ("/v1/release", {"lease_id": "l-1"}, "kind"),
    ("/v1/acquire", {"owner": "o", "inference_id": SHA}, "inference_lock_mismatch"),  # not prepared in this root
    ("/v1/prepare", RUN, "local_model_not_found"),
    ("/v1/runs", RUN, "local_model_not_found"),
    ("/v1/runs/r-1/finish", {"status": "failed", "error": {"code": "run_cancelled", "message": "x"}}, "run_not_found"),
    ("/v1/runs/r-1/cancel", {}, "run_not_found"),
]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[web.Application, list[bool], HitchRoot]]:
    root = HitchRoot(tmp_path / "root")
    core = DaemonCore(root, DaemonConfig())
    shutdowns: list[bool] = []
    yield build_app(core, TOKEN, shutdowns.append, RunService(core)), shutdowns, root


def _posts(app: web.Application, calls: list[tuple[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Each ``(path, body)`` posted in order to the app served once (one event loop)."""

    async def call() -> list[tuple[int, dict[str, Any]]]:
        out = []
        async with TestClient(TestServer(app)) as client:
            for path, body in calls:
                resp = await client.post(path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
                out.append((resp.status, await resp.json()))
        return out

    return asyncio.run(call())


def _refused(status: int, answer: dict[str, Any], field: str) -> None:
    assert status == ERROR_TABLE["usage_error"].http_status, answer
    error = answer["error"]
    assert error["code"] == "usage_error", error
    named = {problem["loc"] for problem in error["details"]["problems"]}
    assert field in named or any(loc.startswith(field) for loc in named), error


@pytest.mark.parametrize(("path", "valid", "unknown", "mistyped"), REFUSED, ids=[r[0] for r in REFUSED])
def test_an_unknown_or_mistyped_field_is_refused_and_nothing_happens(
    served: tuple[web.Application, list[bool], HitchRoot],
    path: str,
    valid: dict[str, Any],
    unknown: str,
    mistyped: dict[str, Any],
) -> None:
    app, shutdowns, root = served
    bodies = [(unknown, {**valid, unknown: 1})] + [(field, {**valid, field: value}) for field, value in mistyped.items()]
    answers = _posts(app, [(path, body) for _, body in bodies] + [(path, ["not", "an", "object"])])
    for (field, _), (status, answer) in zip(bodies, answers, strict=False):
        _refused(status, answer, field)
    status, answer = answers[-1]
    assert (status, answer["error"]["code"]) == (400, "usage_error")
    assert shutdowns == [] and not root.runs.exists() and not root.sealed_locks.exists()


@pytest.mark.parametrize(("path", "body", "outcome"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_a_valid_body_reaches_the_route(
    served: tuple[web.Application, list[bool], HitchRoot], path: str, body: dict[str, Any], outcome: str
) -> None:
    app, _, _ = served
    [(status, answer)] = _posts(app, [(path, body)])
    if outcome == "kind":
        assert status == 200 and "kind" in answer, answer
    else:
        assert answer["error"]["code"] == outcome, answer


def test_a_run_that_did_not_complete_needs_a_code_of_the_table(served: tuple[web.Application, list[bool], HitchRoot]) -> None:
    app, _, _ = served
    bodies = [{"status": "failed"}, {"status": "cancelled", "error": {"code": "no_such_code", "message": "x"}}]
    for status, answer in _posts(app, [("/v1/runs/r-1/finish", body) for body in bodies]):
        assert (status, answer["error"]["code"]) == (400, "usage_error"), answer


@pytest.mark.parametrize(
    "bad", [{"capture_max_bytes": True}, {"capture_max_bytes": 0}, {"run_id": "../escape"}, {"device": "metal"}]
)
def test_a_run_request_out_of_range_is_refused_before_admission(
    served: tuple[web.Application, list[bool], HitchRoot], bad: dict[str, Any]
) -> None:
    app, _, root = served
    [(status, answer)] = _posts(app, [("/v1/runs", {**RUN, **bad})])
    _refused(status, answer, next(iter(bad)))
    assert not root.runs.exists()  # nothing admitted
