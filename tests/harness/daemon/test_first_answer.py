"""The first answer (real daemon, real gateway, fake engine processes).

- A run of a lock never prepared takes over the engine that verified the sealed lock: two engine starts in
  all (probe, verified), the run's lease on the verified one; a later run of that lock starts one.
- An idle service (no owner) yields its cores at once to a start that waits for them; a leased one never does,
  and the waiting start shows who holds them until the lease ends.
- An idle service of the same lock under another engine choice is drained and replaced; a held one is refused
  with ``inference_service_held`` naming its holder.
- ``GET /v1/progress/{run id}`` shows the phases of the wait, in order.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.app.daemon_client import DaemonClient, start_daemon
from harness.errors import HitchError
from harness.runtimes import get_runtime
from harness.service.state_store import ServiceStateStore
from tests.harness.daemon.conftest import FAST
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs

pytestmark = pytest.mark.integration


def _body(run_id: str, profile: str = "baseline", *fake_flags: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "model": "local/tiny",
        "device": "cpu",
        "profile": profile,
        "runtime": get_runtime(GENERIC_RUNTIME).runtime_id,
        "engine": "fake",
        "fake_flags": list(fake_flags),
    }


def _create(client: DaemonClient, body: dict[str, Any]) -> dict[str, Any]:
    return client.request("POST", "/v1/runs", body, timeout_s=300)


def _starts(inputs: ServiceInputs) -> list[tuple[str, int]]:
    """Every engine start of the root: (service id, epoch)."""
    out = []
    for service_dir in sorted(inputs.root.services.iterdir()):
        events = ServiceStateStore(inputs.root, service_dir.name).events()
        out += [(e.service_id, e.epoch) for e in events if e.event == "inference.starting"]
    return out


def _events(inputs: ServiceInputs, service_id: str, name: str) -> list[dict[str, Any]]:
    return [e.details for e in ServiceStateStore(inputs.root, service_id).events() if e.event == name]


def test_a_run_of_a_new_lock_takes_over_the_verified_engine(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    run = _create(client, _body("first"))
    starts = _starts(inputs)
    assert len(starts) == 2, starts  # the probe and the verified start: the run got the verified one
    assert (run["service_id"], run["epoch"]) in starts
    [service] = [s for s in client.services()["services"] if s["service_id"] == run["service_id"]]
    assert [lease["owner"] for lease in service["leases"]] == ["first"]
    assert [e.event for e in ServiceStateStore(inputs.root, run["service_id"]).events()].count("inference.acquired") == 2

    client.request("DELETE", "/v1/runs/first")
    client.stop_service(run["service_id"])
    again = _create(client, _body("second"))  # sealed now: one start
    assert again["inference_id"] == run["inference_id"]
    assert len(_starts(inputs)) == 3


def test_an_idle_service_yields_to_a_waiting_start_and_a_leased_one_does_not(tmp_path: Path, inputs: ServiceInputs) -> None:
    cores = inputs.lock.resources.cpu_cores  # room for one service at a time
    start_daemon(inputs.root, [*FAST, "--capacity-cpu", str(cores)])
    client = DaemonClient(inputs.root)
    baseline = _create(client, _body("holder"))
    # leased: a start of another lock waits, and its progress names who holds the cores
    answers: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: answers.update(run=_create(client, _body("waiter", "throughput"))))
    waiter.start()
    seen: list[dict[str, Any]] = []
    end = time.monotonic() + 120
    while time.monotonic() < end and not any(p.get("phase") == "queued" and p.get("behind") for p in seen):
        seen.append(client.progress("waiter"))
        time.sleep(0.1)
    queued = next(p for p in seen if p.get("phase") == "queued" and p.get("behind"))
    holder = f"{baseline['service_id']}#{baseline['epoch']}"
    assert queued["behind"] == [{"holder": holder, "service_id": baseline["service_id"], "state": "ready", "owners": ["holder"]}]
    assert _events(inputs, baseline["service_id"], "inference.draining") == []  # held: never yields
    client.request("DELETE", "/v1/runs/holder")  # now idle: it yields at once, long before its 60 s TTL
    waiter.join(timeout=120)
    assert not waiter.is_alive() and answers["run"]["status"] == "running"
    drained = _events(inputs, baseline["service_id"], "inference.draining")
    assert drained, "the idle service did not yield"
    yielded_to = drained[0]["yielded_to"]  # the waiting run's first start (its lock's probe)
    assert yielded_to != baseline["service_id"] and _events(inputs, yielded_to, "inference.starting")


def test_an_idle_service_of_another_engine_choice_is_replaced_and_a_held_one_is_refused(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    first = _create(client, _body("seed-0"))
    with pytest.raises(HitchError) as caught:  # held by seed-0: the conflict stands and names the holder
        _create(client, _body("seed-1", "baseline", "--fake-seed", "1"))
    assert caught.value.code == "inference_service_held"
    assert caught.value.details["owners"] == ["seed-0"] and "seed-0" in caught.value.message
    client.request("DELETE", "/v1/runs/seed-0")
    second = _create(client, _body("seed-2", "baseline", "--fake-seed", "2"))  # idle now: drained and replaced
    assert second["status"] == "running" and second["inference_id"] == first["inference_id"]
    assert second["epoch"] > first["epoch"]
    assert _events(inputs, first["service_id"], "inference.draining")


def test_the_progress_of_a_cold_run_shows_its_phases_in_order(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    answers: dict[str, Any] = {}
    body = _body("slow", "baseline", "--fake-warmup-seconds", "2")
    creator = threading.Thread(target=lambda: answers.update(run=_create(client, body)))
    creator.start()
    seen: list[tuple[str, str | None]] = []
    logs: set[str] = set()
    while creator.is_alive():
        state = client.progress("slow")
        if state.get("phase") is not None:
            mark = (str(state["phase"]), state.get("stage"))
            if not seen or seen[-1] != mark:
                seen.append(mark)
            if state.get("engine_log"):
                logs.add(state["engine_log"])
        time.sleep(0.05)
    creator.join()
    assert answers["run"]["status"] == "running"
    starting = [stage for phase, stage in seen if phase == "starting"]
    assert starting == ["probe", "verify"], seen  # the probe engine, then the verified one (which the run keeps)
    assert all(Path(log).name == "engine.log" for log in logs) and len(logs) == 2
    assert client.progress("slow") == {"kind": "progress", "key": "slow", "phase": None, "schema_version": "1"}


def test_two_runs_of_a_new_lock_at_once_prepare_it_once_and_share_its_service(inputs: ServiceInputs) -> None:
    """Single flight: the second run waits for the first one's prepare (its probe would need the cores the first run's
    verified engine holds) and then shares that engine (baseline: one service per lock)."""
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    answers: dict[str, dict[str, Any]] = {}
    makers = [threading.Thread(target=lambda n=n: answers.update({n: _create(client, _body(n))})) for n in ("gw0", "gw1")]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join(timeout=300)
    assert {a["status"] for a in answers.values()} == {"running"}
    assert answers["gw0"]["service_id"] == answers["gw1"]["service_id"]
    assert len(_starts(inputs)) == 2  # one probe, one verified start, for both runs
