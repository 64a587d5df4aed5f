"""Daemon restart after SIGKILL: confirmed leftovers are stopped and their keys rotated; anything that
cannot be confirmed (reused PID, unreadable record) is quarantined and never signalled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from fixtures.process_faults import pid_alive
from harness.app.daemon_client import DaemonClient, reap_spawned, start_daemon
from harness.contracts.service import DeviceAllocationV1, InferenceServiceRecordV1, ProcessIdentityV1
from harness.errors import HitchError
from harness.lock import build_lock
from harness.service.isolation import service_key
from harness.service.state_store import ServiceStateStore
from harness.store import read_manifest
from tests.harness.daemon.conftest import FAST, as_json, hitch, stop_quietly
from tests.harness.engine.inputs import ServiceInputs, service_inputs
from tests.harness.lock_inputs import runtime_manifest

pytestmark = pytest.mark.integration


def kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < end:
        reap_spawned()
        time.sleep(0.05)
    reap_spawned()
    assert not pid_alive(pid)


def test_sigkilled_daemon_restart_stops_leftovers_and_rotates_keys(inputs: ServiceInputs) -> None:
    first = start_daemon(inputs.root, FAST)
    lease = DaemonClient(inputs.root).acquire("run-1", lock=inputs.lock.to_json_dict(), engine="fake")
    sid = lease["service_id"]
    key_file = Path(lease["api_key_file"])
    old_key = key_file.read_text()
    record = ServiceStateStore(inputs.root, sid).read()
    assert record is not None and record.state == "ready" and record.process is not None
    engine_pid = record.process.pid
    assert engine_pid is not None and pid_alive(engine_pid)
    kill9(first["pid"])
    assert pid_alive(engine_pid)  # the daemon died, its engine did not
    second = start_daemon(inputs.root, FAST)
    assert second["pid"] != first["pid"]
    (outcome,) = [o for o in second["recovery"] if o["service_id"] == sid]
    assert outcome["action"] == "stopped"
    assert "engine-api-key" in outcome["details"]["keys_removed"]
    assert not pid_alive(engine_pid)
    assert not key_file.exists()  # the old epoch's key is gone
    after = ServiceStateStore(inputs.root, sid).read()
    assert after is not None and after.state == "stopped"
    stopped = [e for e in ServiceStateStore(inputs.root, sid).events() if e.event == "inference.stopped"]
    assert stopped[-1].details["recovered"] is True
    again = DaemonClient(inputs.root).acquire("run-2", lock=inputs.lock.to_json_dict(), engine="fake")
    assert again["epoch"] > lease["epoch"]
    assert key_file.read_text() != old_key  # a new epoch, new keys


def _fake_record(inputs: ServiceInputs, service_id: str, identity: ProcessIdentityV1) -> None:
    now = time.time()
    record = InferenceServiceRecordV1(
        service_id=service_id,
        inference_id=inputs.lock.inference_id,
        isolation_key=service_key(inputs.lock, "x", None).isolation_key,
        state="ready",
        epoch=3,
        owner="hitch-daemon",
        process=identity,
        allocation=DeviceAllocationV1(device="cpu"),
        created_at=now,
        updated_at=now,
    )
    ServiceStateStore(inputs.root, service_id).write(record)


def test_a_reused_pid_is_ambiguous_quarantined_and_not_killed(inputs: ServiceInputs) -> None:
    sid = service_key(inputs.lock, "run-1", None).service_id
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        real_start = psutil.Process(sleeper.pid).create_time()
        _fake_record(inputs, sid, ProcessIdentityV1(launcher="process", pid=sleeper.pid, start_time=real_start - 500.0))
        status = start_daemon(inputs.root, FAST)
        (outcome,) = [o for o in status["recovery"] if o["service_id"] == sid]
        assert outcome["action"] == "ambiguous"
        assert sleeper.poll() is None and pid_alive(sleeper.pid)  # never signalled
        quarantined = as_json(hitch(inputs.root, "local", "status", "--json"))["quarantined"]
        assert [q["service_id"] for q in quarantined] == [sid]
        assert quarantined[0]["code"] == "inference_recovery_ambiguous"
        client = DaemonClient(inputs.root)
        with pytest.raises(HitchError) as caught:
            client.acquire("run-1", lock=inputs.lock.to_json_dict(), engine="fake")
        assert caught.value.code == "inference_recovery_ambiguous"
        stop_quietly(inputs.root)
        restarted = start_daemon(inputs.root, FAST)  # still quarantined across restarts
        assert [o["action"] for o in restarted["recovery"] if o["service_id"] == sid] == ["ambiguous"]
        assert sleeper.poll() is None
        cleared = as_json(hitch(inputs.root, "local", "unquarantine", sid, "--json"))
        assert cleared["cleared"] is True
        lease = DaemonClient(inputs.root).acquire("run-1", lock=inputs.lock.to_json_dict(), engine="fake")
        assert lease["service_id"] == sid and lease["epoch"] == 4
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_unreadable_record_is_ambiguous(inputs: ServiceInputs) -> None:
    sid = "svc-unreadable"
    folder = inputs.root.service_dir(sid)
    folder.mkdir(parents=True)
    (folder / "state.json").write_text("{not json")
    status = start_daemon(inputs.root, FAST)
    (outcome,) = [o for o in status["recovery"] if o["service_id"] == sid]
    assert outcome["action"] == "ambiguous"
    assert json.loads((folder / "quarantine.json").read_text())["code"] == "inference_recovery_ambiguous"


GPU = "GPU-00000000-0000-0000-0000-0000000000aa"


def test_two_roots_cannot_lease_the_same_gpu_uuid_with_a_fake_gpu_provider(
    inputs: ServiceInputs, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.harness.engine.inputs import checkpoint_cache

    other = service_inputs(tmp_path / "root-b", checkpoint_cache(tmp_path_factory.getbasetemp()))
    leases = tmp_path / "gpu-leases"
    args = [*FAST, "--fake-gpu", GPU, "--gpu-lease-dir", str(leases), "--capacity-cpu", "64", "--capacity-memory", str(1 << 40)]

    def cuda_lock(root_inputs: ServiceInputs) -> dict[str, object]:
        manifest = read_manifest(root_inputs.root, root_inputs.lock.model_id)
        lock = build_lock(
            manifest, runtime_manifest("cuda"), device="cuda", profile="baseline", cpu_cores_per_node=2, context_tokens=2048
        )
        return lock.to_json_dict()

    try:
        start_daemon(inputs.root, args)
        start_daemon(other.root, args)
        a = DaemonClient(inputs.root).acquire("run-a", lock=cuda_lock(inputs), engine="fake")
        services = DaemonClient(inputs.root).services()["services"]
        assert [s["gpu_uuid"] for s in services] == [GPU]
        with pytest.raises(HitchError) as caught:
            DaemonClient(other.root).acquire("run-b", lock=cuda_lock(other), engine="fake")
        assert caught.value.code == "inference_capacity_exceeded"
        assert caught.value.details["held"][0]["root"] == str(inputs.root.path)
        assert DaemonClient(inputs.root).release(a["lease_id"])
        DaemonClient(inputs.root).stop_service(a["service_id"])
        b = DaemonClient(other.root).acquire("run-b", lock=cuda_lock(other), engine="fake")  # free again
        assert b["service_id"]
    finally:
        stop_quietly(other.root)
