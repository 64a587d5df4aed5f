"""Lifecycle events name the run that caused them (spec §12.1): real daemon, real gateway, fake engine processes.

A run of a lock never prepared causes its prepare (the probe engine started and stopped, the verified engine
started and handed over): every one of those events carries its run id. A second run sharing that service names
itself on its own acquire and release; an operator's stop, caused by no run, names none.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.app.daemon_client import DaemonClient, start_daemon
from harness.app.requests import FinishRunRequest, RunRequest, parse_request
from harness.contracts.events import LifecycleEventV1
from harness.runtimes import get_runtime
from harness.service.state_store import ServiceStateStore
from tests.harness.daemon.conftest import FAST
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs

pytestmark = pytest.mark.integration


def _ask(run_id: str) -> RunRequest:
    body: dict[str, Any] = {"run_id": run_id, "harness": "model-call", "model": "local/tiny", "device": "cpu",
                            "runtime": get_runtime(GENERIC_RUNTIME).runtime_id, "engine": "fake"}  # fmt: skip
    return parse_request(RunRequest, body)


def _events(inputs: ServiceInputs) -> list[LifecycleEventV1]:
    out: list[LifecycleEventV1] = []
    for service_dir in sorted(inputs.root.services.iterdir()):
        out += ServiceStateStore(inputs.root, service_dir.name).events()
    return out


def test_the_lifecycle_events_a_run_causes_carry_its_run_id(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    first = client.create_run(_ask("first"))
    caused = _events(inputs)
    mine = [(e.event, e.epoch) for e in caused if e.service_id == first["service_id"]]
    # its service's start and its acquire, and the prepare made for it (its own service: the probe engine)
    assert {"inference.preparing", "inference.starting", "inference.ready", "inference.acquired"} <= {n for n, _ in mine}
    assert ("inference.starting", first["epoch"]) in mine
    probe = {e.service_id for e in caused} - {first["service_id"]}
    assert len(probe) == 1, caused
    assert {e.event for e in caused if e.service_id in probe} >= {"inference.starting", "inference.ready", "inference.stopped"}
    assert {e.run_id for e in caused} == {"first"}, [(e.event, e.run_id) for e in caused if e.run_id != "first"]

    # a second run shares the (now idle) service: its own acquire and release name it, and nothing starts
    client.finish_run("first", FinishRunRequest(status="completed"))
    second = client.create_run(_ask("second"))
    assert (second["service_id"], second["epoch"]) == (first["service_id"], first["epoch"])
    client.finish_run("second", FinishRunRequest(status="completed"))
    shared = [e for e in ServiceStateStore(inputs.root, first["service_id"]).events() if e.epoch == first["epoch"]]
    assert [e.run_id for e in shared if e.event == "inference.starting"] == ["first"]
    leases = [(e.event, e.owner_id, e.run_id) for e in shared if e.event in ("inference.acquired", "inference.released")]
    prepare = leases[0][1]
    assert prepare.startswith("prepare-")  # the prepare made for "first" verified the lock on this engine
    assert leases == [
        ("inference.acquired", prepare, "first"),
        ("inference.acquired", "first", "first"),  # handed over to the run
        ("inference.released", prepare, "first"),
        ("inference.released", "first", "first"),
        ("inference.acquired", "second", "second"),
        ("inference.released", "second", "second"),
    ]

    # an operator's stop is caused by no run
    assert client.stop_service(first["service_id"])
    ended = [e for e in ServiceStateStore(inputs.root, first["service_id"]).events() if e.epoch == first["epoch"]]
    assert [(e.event, e.run_id) for e in ended[-2:]] == [("inference.draining", None), ("inference.stopped", None)]
