"""The engine in a network namespace with loopback only (``certify/kit/offline_engine.py``, the module behind
``security.network.engine_offline``), on the fake engine: it starts as the process launcher starts it, passes
readiness, answers a chat request, and every attempt to leave the machine fails. The throw-away service's keys
and log folders are gone afterwards."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from certify.kit.offline_engine import run_offline
from tests.components import missing
from tests.harness.engine.inputs import checkpoint_cache, service_inputs


def _netns_or_skip() -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        missing("netns", "unshare or ip is not installed")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        missing("netns", f"this user cannot create a network namespace: {probe.stderr.strip()}")


@pytest.mark.integration
def test_the_fake_engine_answers_in_a_namespace_with_no_route_out(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _netns_or_skip()
    inputs = service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))
    before = set(inputs.root.services.glob("*")) if inputs.root.services.exists() else set()
    facts = run_offline(inputs.root, inputs.lock.to_json_dict(), "fake", timeout_s=300)
    assert "error" not in facts, facts
    assert facts["status"] == 200 and facts["completion_tokens"] >= 1
    assert facts["ready_steps"] == ["health", "server_info", "responses", "responses_stream", "flush_cache"]
    outbound = facts["outbound"]
    assert outbound["interfaces"] == ["lo"]
    assert {route["dev"] for route in outbound["routes"]} == {"lo"}
    assert set(outbound["tcp"].values()) == {"OSError[101]"}  # ENETUNREACH: no route, not a refused port
    assert outbound["dns"] != "resolved"
    assert facts["engine_log"].strip()  # the engine's own log came back before its folder was removed
    after = set(inputs.root.services.glob("*")) if inputs.root.services.exists() else set()
    assert after == before and not list(inputs.root.private.glob("offline-*"))
