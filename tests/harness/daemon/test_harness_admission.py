"""The daemon's ``POST /v1/runs`` admits a harness by the rule the CLI applies (spec §9.1 step 1,
:func:`harness.app.harness_admission.admit_harness`): a harness without a passing compatibility profile for the
lock it asks for is ``inference_harness_unsupported`` (HTTP 400) before anything is written or started — no
``runs/<id>/run.json``, no service. Asked of the daemon directly, as any client of its API would.

The daemon's app is served in-process on a loopback port (``aiohttp.test_utils``); nothing starts an engine."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from harness.app.daemon_client import DaemonClient
from harness.app.profiles import CODEX_FIELDS, ProfileStore, codex_key_of, result
from harness.app.requests import FinishRunRequest, RunRequest, parse_request
from harness.app.run_store import RunStore
from harness.daemon.core import DaemonConfig, DaemonCore
from harness.daemon.runs import RunService
from harness.daemon.server import build_app
from harness.errors import ERROR_TABLE, HitchError
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs

TOKEN = "t" * 64
CODEX = {"artifact": "npm:@openai/codex@0.171.0", "version": "0.171.0", "protocol": "responses"}


def _post(root: HitchRoot, body: dict[str, Any]) -> tuple[int, dict[str, Any], list[str]]:
    """``body`` posted to ``/v1/runs`` of a daemon app on ``root``; the answer and the services it then holds."""
    core = DaemonCore(root, DaemonConfig())

    async def call() -> tuple[int, dict[str, Any], list[str]]:
        app = build_app(core, TOKEN, lambda _: None, RunService(core))
        async with TestClient(TestServer(app)) as client:
            resp = await client.post("/v1/runs", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
            return resp.status, await resp.json(), [s.service_id for s in core.manager.services()]

    return asyncio.run(call())


def _run(harness: str, run_id: str, **more: Any) -> dict[str, Any]:
    return {"run_id": run_id, "harness": harness, "model": "local/tiny", "runtime": GENERIC_RUNTIME, "engine": "fake",
            **more}  # fmt: skip


def _refused(root: HitchRoot, body: dict[str, Any]) -> dict[str, Any]:
    status, answer, services = _post(root, body)
    assert status == ERROR_TABLE["inference_harness_unsupported"].http_status, answer
    assert answer["error"]["code"] == "inference_harness_unsupported", answer
    assert RunStore(root).read(body["run_id"]) is None  # nothing admitted
    assert services == []  # nothing started
    error: dict[str, Any] = answer["error"]
    return error


@pytest.mark.parametrize(
    ("harness", "more", "says"),
    [
        ("bogus", {}, "is not supported"),
        ("harbor:", {}, "is not supported"),
        ("codex", {}, "names no artifact"),
        ("harbor:terminus-2", {}, "names no artifact"),
        ("codex", {"harness_artifact": CODEX}, "no certified compatibility profile"),
        (
            "harbor:terminus-2",
            {"harness_artifact": {"artifact": "harbor@0.25.0:other", "version": "0.25.0", "protocol": "chat-completions"}},
            "is not the agent its artifact names",
        ),
    ],
)
def test_a_harness_without_a_passing_profile_is_refused_by_the_daemon_before_anything(
    inputs: ServiceInputs, harness: str, more: dict[str, Any], says: str
) -> None:
    error = _refused(inputs.root, _run(harness, "r-refused", **more))
    assert says in error["message"], error


def test_the_daemon_refuses_a_profile_that_passed_only_on_another_engine_or_failed(inputs: ServiceInputs) -> None:
    """The same rule as ``hitch run``'s: the profile must have passed on the engine the run asks for, and every
    one of its results must have passed."""
    root = inputs.root
    key = codex_key_of(get_runtime(GENERIC_RUNTIME).runtime_id, inputs.lock.model_id, CODEX["artifact"], CODEX["version"])
    store = ProfileStore(root)
    store.record(key, CODEX_FIELDS, result("agents.codex.turn", "sglang", "cpu", True))
    error = _refused(root, _run("codex", "r-engine", harness_artifact=CODEX))
    assert error["details"]["engine"] == "fake", error
    store.record(key, CODEX_FIELDS, result("agents.codex.turn", "fake", "cpu", False))
    error = _refused(root, _run("codex", "r-failed", harness_artifact=CODEX))
    assert error["details"]["failed"] == ["agents.codex.turn"], error


def test_a_request_that_is_not_a_harness_artifact_is_a_usage_error(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    status, answer, _ = _post(root, _run("codex", "r-bad", harness_artifact={"artifact": "x", "version": "1"}))
    assert status == 400 and answer["error"]["code"] == "usage_error", answer


def test_a_run_that_needs_tool_calls_is_refused_on_an_engine_that_cannot_make_them(inputs: ServiceInputs) -> None:
    """Spec §9.1 step 5, as the caller needs: a Codex run (here one that certifies Codex, so no profile is
    asked) on a lock that claims tool calls gets the service's epoch probed with a forced call; an engine that
    hands calls back as text fails the run before it is bound. A model-call run needs no tool calls: on the
    same engine it binds."""
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    client = DaemonClient(root)
    flags = ["--fault", "unparsed_tool_calls"]
    with pytest.raises(HitchError) as caught:
        client.create_run(parse_request(RunRequest, _run("codex", "r-tools", certifying=True, fake_flags=flags)))
    assert caught.value.code == "inference_engine_unhealthy" and caught.value.details["step"] == "tool_call"
    record = RunStore(root).read("r-tools")
    assert record is not None and record.status == "failed" and record.binding_id is None
    assert record.error is not None and record.error.code == "inference_engine_unhealthy"
    text = client.create_run(parse_request(RunRequest, _run("model-call", "r-text", fake_flags=flags)))
    assert text["status"] == "running"
    client.finish_run("r-text", FinishRunRequest(status="completed"))
