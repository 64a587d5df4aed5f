"""Daemon SIGKILL with an engine *container* running: the restarted daemon finds it by this root's labels
and the recorded container id, stops and removes it, and rotates the keys. Needs Docker (skipped unless
``HITCH_REQUIRE_DOCKER=1``, then a failure) and the fake engine image."""

from __future__ import annotations

import subprocess
from pathlib import Path

import docker
import pytest

from harness.app.daemon_client import DaemonClient, start_daemon
from harness.contracts.lock import compute_inference_id
from harness.service.state_store import ServiceStateStore
from tests.harness.daemon.conftest import FAST
from tests.harness.daemon.test_recovery import kill9
from tests.harness.engine.inputs import ServiceInputs
from tests.harness.service.integration_support import LeakGuard

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

REPO = Path(__file__).resolve().parents[3]


def _status(container_id: str) -> str:
    """Through the docker CLI: here the SDK left a pooled unix connection unclosed (a ResourceWarning, an error)."""
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Status}}", container_id], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() if out.returncode == 0 else "gone"


def test_sigkilled_daemon_restart_removes_the_leftover_container(
    inputs: ServiceInputs, client: docker.DockerClient, image_id: str, leak_guard: LeakGuard
) -> None:
    leak_guard.docker = client
    leak_guard.watch_root(inputs.root.path)
    lock = inputs.lock.to_json_dict()
    lock["resources"].update(memory_bytes=512 << 20, cpu_cores=1)
    lock.pop("inference_id")
    lock["inference_id"] = compute_inference_id(lock)
    first = start_daemon(inputs.root, FAST)
    lease = DaemonClient(inputs.root).acquire("run-1", lock=lock, engine="fake", launcher="oci", image=image_id)
    record = ServiceStateStore(inputs.root, lease["service_id"]).read()
    assert record is not None and record.process is not None and record.process.container_id is not None
    container_id = record.process.container_id
    key_file = Path(lease["api_key_file"])
    kill9(first["pid"])
    assert _status(container_id) == "running"  # the engine outlived its daemon
    second = start_daemon(inputs.root, FAST)
    (outcome,) = [o for o in second["recovery"] if o["service_id"] == lease["service_id"]]
    assert outcome["action"] == "stopped" and outcome["details"]["container_id"] == container_id
    assert _status(container_id) == "gone"
    assert not key_file.exists()
