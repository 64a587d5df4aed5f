"""``hitch daemon ...`` and ``hitch local prepare|status|stop`` as a user runs them (real daemon, fake engine)."""

from __future__ import annotations

import stat
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import psutil
import pytest

from harness.app.daemon_client import DaemonClient, start_daemon
from harness.contracts.events import LifecycleEventV1
from harness.errors import ERROR_TABLE
from harness.lock import validate_lock
from harness.paths import DaemonPaths
from harness.service.state_store import ServiceStateStore
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_daemon_start_status_stop_with_private_socket_and_token(inputs: ServiceInputs) -> None:
    started = as_json(hitch(inputs.root, "daemon", "start", "--json", *FAST))
    paths = DaemonPaths(inputs.root)
    assert started["running"] is True and started["socket"] == str(paths.socket)
    assert stat.S_IMODE(paths.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.token.stat().st_mode) == 0o600
    token = paths.token.read_text()
    again = as_json(hitch(inputs.root, "daemon", "start", "--json"))
    assert again["pid"] == started["pid"]  # one daemon per root
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(paths.socket)), base_url="http://d") as client:
        wrong = client.get("/v1/status", headers={"Authorization": "Bearer not-the-token"})
        missing = client.get("/v1/services")
    assert wrong.status_code == missing.status_code == ERROR_TABLE["inference_token_invalid"].http_status
    assert wrong.json()["error"]["code"] == "inference_token_invalid"
    status = as_json(hitch(inputs.root, "daemon", "status", "--json"))
    assert status["pid"] == started["pid"] and status["services"] == []
    assert token not in str(status)
    metrics = httpx.get(status["gateway"]["metrics_url"], timeout=10, trust_env=False)  # the gateway's own port
    assert metrics.status_code == 200 and "# TYPE hitch_gateway_aborts_confirming gauge" in metrics.text
    stopped = as_json(hitch(inputs.root, "daemon", "stop", "--json"))
    assert stopped["stopped"] is True
    assert _gone(started["pid"])
    assert not paths.socket.exists() and not paths.token.exists()
    assert as_json(hitch(inputs.root, "daemon", "status", "--json"))["running"] is False


_HOLD_MUTEX = "import filelock, sys; m = filelock.FileLock(sys.argv[1]); m.acquire(); print('held', flush=True); sys.stdin.read()"


def test_a_starter_whose_daemon_lost_the_mutex_waits_for_the_holder_and_starts_one_when_it_is_gone(
    inputs: ServiceInputs,
) -> None:
    # Two xdist workers starting the session's daemon at once: one daemon takes the mutex and is still
    # recovering (not answering), the other exits EXIT_ALREADY_RUNNING. Its starter must not fail on that.
    paths = DaemonPaths(inputs.root)
    paths.ensure()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_MUTEX, str(paths.mutex)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    outcome: dict[str, Any] = {}

    def start() -> None:
        try:
            outcome["status"] = start_daemon(inputs.root, FAST, timeout_s=120)
        except Exception as exc:  # the test reports what the starter raised
            outcome["error"] = exc

    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        starter = threading.Thread(target=start)
        starter.start()
        end = time.monotonic() + 60
        while "another daemon already runs" not in (paths.log.read_text() if paths.log.exists() else ""):
            assert time.monotonic() < end, "the spawned daemon never found the mutex held"
            time.sleep(0.05)
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()  # the holder goes away without ever serving
        holder.wait(timeout=30)
        holder.stdout.close()
    starter.join(timeout=150)
    assert "error" not in outcome, outcome
    status = outcome["status"]
    assert not _gone(status["pid"])
    assert DaemonClient(inputs.root).status()["pid"] == status["pid"]


def test_prepare_with_fake_engine_seals_the_lock_and_stops_the_service(inputs: ServiceInputs) -> None:
    out = as_json(
        hitch(
            inputs.root,
            "local",
            "prepare",
            "local/tiny",
            "--device",
            "cpu",
            "--profile",
            "baseline",
            "--engine",
            "fake",
            "--json",
        )
    )
    iid = out["inference_id"]
    folder = inputs.root.digest_dir(inputs.root.sealed_locks, iid)
    lock = validate_lock(__import__("json").loads((folder / "lock.json").read_text()))
    assert lock.inference_id == iid and out["lock_path"] == str(folder / "lock.json")
    validation = __import__("json").loads((folder / "validation.json").read_text())
    assert validation["inference_id"] == iid and validation["engine"] == "fake"
    # the fake's memory holds more than the draft's one-request floor: prepare seals what it chose
    assert validation["reproduced"]["max_total_num_tokens"] == lock.execution.max_total_tokens
    assert validation["probed"]["max_total_tokens"] > validation["draft"]["max_total_tokens"]
    assert validation["readiness"]["steps"] == ["health", "server_info", "responses", "responses_stream", "flush_cache"]
    assert out["stopped"] is True and out["resealed"] is True
    events: list[LifecycleEventV1] = ServiceStateStore(inputs.root, out["service_id"]).events()
    names = [e.event for e in events]
    expected = ["inference.preparing", "inference.queued", "inference.starting", "inference.ready", "inference.acquired"]
    expected += ["inference.released", "inference.draining", "inference.stopped"]
    positions = [names.index(n) for n in expected]
    assert positions == sorted(positions), names
    # one draining and one stopped per epoch: the manager records them, with the supervisor's exit details
    assert names.count("inference.draining") == 1 and names.count("inference.stopped") == 1, names
    (stopped,) = [e for e in events if e.event == "inference.stopped"]
    assert stopped.owner_id == "hitch-manager", stopped
    assert "exit_code" in stopped.details and "reason" in stopped.details, stopped.details
    assert all(e.service_id == out["service_id"] and e.inference_id == iid and e.owner_id and e.timestamp > 0 for e in events)
    record = ServiceStateStore(inputs.root, out["service_id"]).read()
    assert record is not None and record.state == "stopped" and record.process is not None and record.process.pid
    assert _gone(record.process.pid)
    # the sealed lock is now acquirable by id through the daemon
    client = DaemonClient(inputs.root)
    lease = client.acquire("run-1", inference_id=iid, engine="fake")
    assert lease["inference_id"] == iid and lease["epoch"] == record.epoch + 1
    assert client.release(lease["lease_id"]) is True


def test_local_stop_with_a_live_lease_is_in_use_unless_forced(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    lease = client.acquire("run-1", lock=inputs.lock.to_json_dict(), engine="fake")
    key = (inputs.root.private / lease["service_id"] / "engine-api-key").read_text()
    status = as_json(hitch(inputs.root, "local", "status", "--json"))
    (service,) = status["services"]
    assert service["state"] == "ready" and service["inference_id"] == inputs.lock.inference_id
    assert service["epoch"] == lease["epoch"] and service["leases"] == [{"lease_id": lease["lease_id"], "owner": "run-1"}]
    assert key not in str(status)
    refused = hitch(inputs.root, "local", "stop", "--json")
    err = as_json(refused, code=ERROR_TABLE["inference_in_use"].exit_code)["error"]
    assert err["code"] == "inference_in_use"
    assert not _gone(service["pid"])
    forced = as_json(hitch(inputs.root, "local", "stop", lease["service_id"], "--force", "--json"))
    assert forced["stopped"] == [lease["service_id"]]
    assert _gone(service["pid"])
    assert client.release(lease["lease_id"]) is False  # revoked by the forced stop
    assert as_json(hitch(inputs.root, "local", "status", "--json"))["services"] == []


def test_offline_prepare_without_the_runtime_fails_at_once_with_the_commands(inputs: ServiceInputs) -> None:
    proc = hitch(inputs.root, "local", "prepare", "local/tiny", "--device", "cpu", "--allow-uncertified", "--profile",
                 "baseline", "--offline", "--json")  # fmt: skip
    err = as_json(proc, code=ERROR_TABLE["inference_runtime_unavailable"].exit_code)["error"]
    assert err["code"] == "inference_runtime_unavailable"
    install, prepare = err["details"]["run_first"]
    assert install.startswith("hitch runtime install sglang-0.5.23-cpu-generic --root ")
    assert prepare.startswith("hitch local prepare local/tiny --device cpu --allow-uncertified --profile baseline")
    human = hitch(inputs.root, "local", "prepare", "local/tiny", "--allow-uncertified", "--offline")
    assert "hitch runtime install sglang-0.5.23-cpu-generic" in human.stderr
    assert as_json(hitch(inputs.root, "daemon", "status", "--json"))["running"] is False  # nothing was started


def test_offline_with_an_oci_runtime_never_pulls_and_names_the_prepare_command(inputs: ServiceInputs) -> None:
    proc = hitch(inputs.root, "local", "prepare", "local/tiny", "--device", "cpu", "--allow-uncertified", "--launcher", "oci",
                 "--runtime", "sglang-0.5.15.post1-cpu", "--offline", "--json")  # fmt: skip
    err = as_json(proc, code=ERROR_TABLE["inference_runtime_unavailable"].exit_code)["error"]
    assert err["code"] == "inference_runtime_unavailable" and err["details"]["why"] == "it has no pinned digest"
    install, prepare = err["details"]["run_first"]
    assert install.startswith("hitch runtime pin sglang-0.5.15.post1-cpu")  # an unpinned image: pin a local one
    assert prepare.startswith("hitch local prepare local/tiny --device cpu --allow-uncertified")
    assert as_json(hitch(inputs.root, "daemon", "status", "--json"))["running"] is False  # nothing was started
