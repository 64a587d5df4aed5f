"""lifecycle: one engine is shared, a cancelled request frees its slot, an idle service stops on time, and a
daemon that died is cleaned up after by the next one (spec §8.2, §9.1, §9.3).

- reuse and cancel run on the session's shared service (new runs on it, deleted afterwards);
- idle stop and recovery need a daemon with a short idle TTL that may be SIGKILLed: the private daemon of
  :mod:`certify.kit.stack` (its own HITCH_ROOT, the session's engine). On a real engine the
  recovery check reuses the engine the faults suite left running, and the idle-stop check reuses the one
  the recovery check started, so the real engine starts as few times as possible.

Timings go into the entry as metrics: ``warm_acquire_ms``, ``cancel_slot_free_ms``, ``idle_stop_s``,
``idle_stop_after_ttl_s``, ``recovery_restart_s``, and all of them together as ``_lifecycle`` for the
report page.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from certify.kit.daemon import PrivateDaemon
from certify.kit.probes import kill_pid, session_service, wait_until
from certify.kit.requests import chat_body
from certify.kit.streams import client_gone
from certify.registry import check
from certify.session import CertifyEnv, RunHandle
from certify.turns import quiet_turn
from fixtures.engine_faults import EngineTarget
from fixtures.process_faults import pid_alive
from harness.app.daemon_client import reap_spawned

CANCEL_BOUND_S = 5.0
IDLE_GRACE_S = 10.0


_TIMINGS: dict[str, float] = {}


def _record(certify_record: Any, name: str, value: float) -> None:
    _TIMINGS[name] = value
    certify_record.metric(name, value)
    certify_record.metric("_lifecycle", dict(_TIMINGS))


def _serves(run: RunHandle) -> int:
    r = httpx.post(
        run.base_url + "/chat/completions", json=chat_body(run.wire_model, stream=False), headers=run.headers(), timeout=60
    )
    return r.status_code


def _service_engine(env: CertifyEnv) -> str | None:
    """What names the session service's engine (its process or its container), as its record says."""

    record = session_service(env)
    return None if record is None or record.process is None else EngineTarget(record.process).key


# -- reuse -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reuse(certify_env: CertifyEnv) -> dict[str, Any]:
    env = certify_env
    engine_before = _service_engine(env)
    t0 = time.perf_counter()
    a = env.new_run()
    t1 = time.perf_counter()
    b = env.new_run()
    t2 = time.perf_counter()
    try:
        svc = env.service()
        same_inference = [s for s in env.daemon.services().get("services", []) if s.get("inference_id") == env.run.inference_id]
        out = {
            "runs": [(r.service_id, r.epoch) for r in (a, b)],
            "session": (env.run.service_id, env.run.epoch),
            "owners": sorted((svc or {}).get("owners", [])),
            "engine_before": engine_before,
            "engine_after": _service_engine(env),
            "services": len(same_inference),
            "served": [_serves(a), _serves(b)],
            "run_ids": [a.run_id, b.run_id],
            "warm_acquire_ms": round(min(t1 - t0, t2 - t1) * 1000, 2),
        }
    finally:
        env.delete_run(a)
        env.delete_run(b)
    return out


@check(
    "lifecycle.reuse.same_service",
    description="two runs of the same lock share one service and one epoch",
    summary=lambda d: f"{len(d['runs'])} runs of one lock share service {d['runs'][0][0]} and epoch {d['runs'][0][1]}",
)
def test_reuse_same_service(reuse: dict[str, Any], certify_record: Any) -> None:
    _record(certify_record, "warm_acquire_ms", reuse["warm_acquire_ms"])
    certify_record.detail("runs", reuse["runs"])
    assert reuse["runs"] == [reuse["session"], reuse["session"]]
    assert set(reuse["run_ids"]) <= set(reuse["owners"])
    assert reuse["served"] == [200, 200]


@check(
    "lifecycle.reuse.no_second_engine",
    description="a second run starts no engine: same engine process (or container), one service",
    summary="a second run started no engine: the same {engine} serves both",
)
def test_reuse_no_second_engine(reuse: dict[str, Any], certify_record: Any) -> None:
    certify_record.detail("engine", reuse["engine_after"])
    assert reuse["engine_before"] is not None and reuse["engine_before"] == reuse["engine_after"]
    assert reuse["services"] == 1


# -- cancel ----------------------------------------------------------------------------------------------


@pytest.mark.exclusive_engine
@pytest.mark.quiet
@check(
    "lifecycle.cancel.slot_freed",
    description="a cancelled stream frees its engine slot within 5 s",
    summary="a cancelled stream freed its engine slot within 5 s; the evidence row says {evidence_status}",
)
def test_cancel_frees_slot(certify_env: CertifyEnv, certify_record: Any) -> None:
    with client_gone(certify_env) as gone:
        freed_ms = round(gone.freed_ms, 1)
        _record(certify_record, "cancel_slot_free_ms", freed_ms)
        certify_record.detail("evidence_status", gone.row["status"])
        assert gone.row["status"] == "cancelled"
        assert freed_ms <= CANCEL_BOUND_S * 1000


# -- recovery (private daemon) ---------------------------------------------------------------------------


def _warm_run(daemon: PrivateDaemon) -> RunHandle:
    """The run another check left leased on the private daemon (its engine already started), or a new one."""
    warm = daemon.runs.get(str(daemon.shared.get("warm_run_id")))
    if warm is not None:
        record = daemon.record(warm.service_id)
        if record is not None and record.state == "ready" and record.epoch == warm.epoch:
            return warm
    run = daemon.create_run()
    daemon.shared["warm_run_id"] = run.run_id
    return run


@pytest.fixture(scope="module")
def recovery(private_daemon: PrivateDaemon, request: pytest.FixtureRequest) -> dict[str, Any]:
    daemon = private_daemon
    run = _warm_run(daemon)
    # the restart's timing is taken with the machine to itself
    with quiet_turn(request.config, "daemon recovery") as phase:
        outcome = _recover(daemon, run)
    return outcome | {"quiet_phase": phase.detail()}


def _recover(daemon: PrivateDaemon, run: RunHandle) -> dict[str, Any]:
    engine = daemon.engine_target(run.service_id)
    assert engine is not None
    _, old_key = daemon.engine_endpoint(run.service_id)
    old_pid = daemon.daemon_pid()
    kill_pid(old_pid)

    def daemon_gone() -> bool:
        reap_spawned()  # the daemon is our child (spawned by start_daemon): collect it, no zombie
        return not pid_alive(old_pid)

    wait_until(daemon_gone, 15.0, what="the daemon gone")
    engine_survived = engine.alive()
    daemon.runs.clear()  # the killed daemon's runs died with it
    daemon.shared.pop("warm_run_id", None)
    t0 = time.monotonic()
    status = daemon.start()
    restart_s = time.monotonic() - t0
    outcomes = [o for o in status.get("recovery", []) if o.get("service_id") == run.service_id]
    engine_gone = not engine.alive() or bool(wait_until(lambda: not engine.alive(), 15.0, what="leftover gone"))
    record = daemon.record(run.service_id)
    again = daemon.create_run()
    daemon.shared["warm_run_id"] = again.run_id  # the idle-stop check measures this one
    return {
        "run": run,
        "engine_survived_daemon": engine_survived,
        "outcomes": outcomes,
        "engine_gone": engine_gone,
        "record_state": record.state if record is not None else None,
        "restart_s": round(restart_s, 2),
        "key_rotated": daemon.engine_endpoint(again.service_id)[1] != old_key,
        "again": again,
        "again_status": _serves(again),
    }


@check(
    "lifecycle.recovery.leftover_stopped",
    description="after a daemon SIGKILL the next daemon stops the leftover engine",
    summary=lambda d: (
        "after a daemon SIGKILL the next daemon stopped the leftover engine: " + "; ".join(o["reason"] for o in d["outcomes"])
    ),
)
def test_recovery_leftover_stopped(recovery: dict[str, Any], certify_record: Any) -> None:
    _record(certify_record, "recovery_restart_s", recovery["restart_s"])
    certify_record.detail("quiet_phase", recovery["quiet_phase"])
    certify_record.detail("outcomes", recovery["outcomes"])
    assert recovery["engine_survived_daemon"], "the engine should outlive its daemon (else nothing was recovered)"
    assert [o["action"] for o in recovery["outcomes"]] == ["stopped"]
    assert recovery["engine_gone"] and recovery["record_state"] == "stopped"


@check(
    "lifecycle.recovery.new_epoch",
    description="after recovery a new run gets a new epoch with new keys",
    summary=lambda d: f"after recovery a new run got a new epoch; {len(d['keys_removed'])} old key files removed",
)
def test_recovery_new_epoch(recovery: dict[str, Any], certify_record: Any) -> None:
    run, again = recovery["run"], recovery["again"]
    keys_removed = recovery["outcomes"][0].get("details", {}).get("keys_removed", []) if recovery["outcomes"] else []
    certify_record.detail("keys_removed", keys_removed)
    assert again.service_id == run.service_id and again.epoch > run.epoch
    assert recovery["key_rotated"] and keys_removed
    assert recovery["again_status"] == 200


# -- idle stop (private daemon) --------------------------------------------------------------------------


@pytest.mark.quiet
@check(
    "lifecycle.idle.stop_after_ttl",
    description="an idle service is stopped within TTL + 10 s, its engine gone",
    summary=lambda d: (
        f"an idle service stopped after its {d['idle_ttl_s']} s TTL: "
        + " → ".join(e.removeprefix("inference.") for e in d["events"])
    ),
)
def test_idle_stop_after_ttl(private_daemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = private_daemon
    run = _warm_run(daemon)
    engine = daemon.engine_target(run.service_id)
    assert engine is not None
    ttl_s = daemon.ttl_ms / 1000
    daemon.delete_run(run)
    daemon.shared.pop("warm_run_id", None)
    t0 = time.monotonic()

    def stopped() -> bool:
        record = daemon.record(run.service_id)
        return record is not None and record.state == "stopped" and not engine.alive()

    wait_until(stopped, ttl_s + IDLE_GRACE_S, interval_s=0.05, what="the idle service stopped")
    idle_stop_s = time.monotonic() - t0
    _record(certify_record, "idle_stop_s", round(idle_stop_s, 2))
    _record(certify_record, "idle_stop_after_ttl_s", round(idle_stop_s - ttl_s, 2))
    certify_record.detail("idle_ttl_s", ttl_s)
    assert idle_stop_s >= ttl_s * 0.9, "stopped before its TTL ran out"
    assert idle_stop_s <= ttl_s + IDLE_GRACE_S

    def epoch_events() -> list[str] | None:  # the manager logs "stopped" once the engine's resources are released
        names: list[str] = [e.event for e in daemon.events(run.service_id) if e.epoch == run.epoch]
        return names if "inference.stopped" in names else None

    events = wait_until(epoch_events, 10.0, interval_s=0.05, what="the epoch's inference.stopped event")
    certify_record.detail("events", events)
    assert events[-2:] == ["inference.draining", "inference.stopped"], events  # once each, nothing after
    assert events.count("inference.draining") == 1 and events.count("inference.stopped") == 1, events
