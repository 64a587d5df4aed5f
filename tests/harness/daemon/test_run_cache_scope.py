"""Runs that name one cache scope share one service (spec §8.3): real daemon, real gateway, fake engine processes.

Under the throughput profile (SGLang's radix cache on) a run shares a service only with runs of its cache scope:
two runs naming the same ``cache_scope_owner`` (an evaluation's trials name its evaluation id) get one service and
one engine start; a run of another scope, or one naming none, gets its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.app.daemon_client import DaemonClient, start_daemon
from harness.app.requests import FinishRunRequest, RunRequest, parse_request
from harness.runtimes import get_runtime
from harness.service.state_store import ServiceStateStore
from tests.harness.daemon.conftest import FAST
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs

pytestmark = pytest.mark.integration


def _ask(run_id: str, scope: str | None) -> RunRequest:
    body: dict[str, Any] = {"run_id": run_id, "harness": "model-call", "model": "local/tiny", "device": "cpu",
                            "profile": "throughput", "runtime": get_runtime(GENERIC_RUNTIME).runtime_id,
                            "engine": "fake"}  # fmt: skip
    if scope is not None:
        body["cache_scope_owner"] = scope
    return parse_request(RunRequest, body)


def _starts(inputs: ServiceInputs, service_id: str) -> list[str | None]:
    return [e.run_id for e in ServiceStateStore(inputs.root, service_id).events() if e.event == "inference.starting"]


def test_throughput_runs_of_one_cache_scope_share_one_service_and_other_scopes_do_not(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    first = client.create_run(_ask("ev-a-trial-0", "ev-a"))
    second = client.create_run(_ask("ev-a-trial-1", "ev-a"))  # while the first is live: the same service
    assert (second["service_id"], second["epoch"]) == (first["service_id"], first["epoch"])
    assert _starts(inputs, first["service_id"]) == ["ev-a-trial-0"]  # one start, by the first trial's run
    [service] = [s for s in client.services()["services"] if s["service_id"] == first["service_id"]]
    assert sorted(lease["owner"] for lease in service["leases"]) == ["ev-a-trial-0", "ev-a-trial-1"]
    for run_id in ("ev-a-trial-0", "ev-a-trial-1"):
        client.finish_run(run_id, FinishRunRequest(status="completed"))
    kept = client.request("GET", "/v1/runs/ev-a-trial-1")["record"]
    assert kept["request"]["cache_scope_owner"] == "ev-a"

    other = client.create_run(_ask("ev-b-trial-0", "ev-b"))  # another evaluation: its own service
    assert other["inference_id"] == first["inference_id"] and other["service_id"] != first["service_id"]
    client.finish_run("ev-b-trial-0", FinishRunRequest(status="completed"))
    alone = client.create_run(_ask("lone-run", None))  # a run naming no scope shares with nobody
    assert alone["service_id"] not in (first["service_id"], other["service_id"])
    client.finish_run("lone-run", FinishRunRequest(status="completed"))
