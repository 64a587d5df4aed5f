"""``hitch local serve`` end to end: real daemon, real gateway, fake engine process."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import httpx
import psutil
import pytest

from harness.app.daemon_client import DaemonClient
from harness.paths import DaemonPaths
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.daemon.serve_support import WAIT_S, chat, serve_process, stop_serve
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration


def test_serve_routes_through_the_gateway_and_sigterm_revokes_and_releases(inputs: ServiceInputs, tmp_path: Path) -> None:
    as_json(hitch(inputs.root, "daemon", "start", "--json", *FAST))
    proc, run, out, err = serve_process(inputs.root, tmp_path, "--run-id", "serve-test")
    try:
        assert run["kind"] == "run" and run["run_id"] == "serve-test"
        assert run["base_url"].startswith("http://127.0.0.1:") and run["base_url"].endswith(f"/runs/{run['binding_id']}/v1")
        token_file = Path(run["token_file"])
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        token = token_file.read_text().strip()
        ok = chat(run, token)
        assert ok.status_code == 200, ok.text
        assert ok.json()["choices"][0]["message"]["content"]
        origin = run["base_url"].split("/runs/")[0]
        info = httpx.get(f"{origin}/server_info", headers={"Authorization": f"Bearer {token}"}, trust_env=False)
        assert info.status_code == 404 and info.json()["error"]["code"] == "inference_route_unavailable"
        leases = [lease for s in DaemonClient(inputs.root).services()["services"] for lease in s["leases"]]
        assert [lease["owner"] for lease in leases] == ["serve-test"]
    finally:
        code = stop_serve(proc)
    assert code == 0, err.read_text()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[-1]["kind"] == "run-delete" and lines[-1]["deleted"] is True and lines[-1]["released"] is True
    assert lines[-1]["signal"] == "SIGTERM"
    assert token not in out.read_text() and token not in err.read_text()
    assert token not in DaemonPaths(inputs.root).log.read_text()
    revoked = chat(run, token)
    assert revoked.status_code == 403 and revoked.json()["error"]["code"] == "inference_binding_revoked"
    assert not token_file.exists()
    status = as_json(hitch(inputs.root, "daemon", "status", "--json"))
    assert all(s["leases"] == [] for s in status["services"])
    again = DaemonClient(inputs.root).request("DELETE", "/v1/runs/serve-test")
    assert again["deleted"] is False  # idempotent
    # the run id again: the same request answers the ended run's record, another is a conflict; nothing is served
    serve = ["local", "serve", "local/tiny", "--device", "cpu", "--profile", "baseline", "--engine", "fake"]
    kept = as_json(hitch(inputs.root, *serve, "--run-id", "serve-test", "--json"))
    assert kept["kind"] == "run-record" and kept["record"]["status"] == "completed" and kept["record"]["binding_id"]
    other = hitch(inputs.root, *serve, "--run-id", "serve-test", "--capture", "full", "--json")
    assert other.returncode == 2 and json.loads(other.stdout)["error"]["code"] == "run_conflict", other.stdout
    assert [s["leases"] for s in DaemonClient(inputs.root).services()["services"]] == [[]]


def test_engine_death_revokes_the_binding(inputs: ServiceInputs, tmp_path: Path) -> None:
    as_json(hitch(inputs.root, "daemon", "start", "--json", *FAST))
    proc, run, _, err = serve_process(inputs.root, tmp_path)
    try:
        token = Path(run["token_file"]).read_text().strip()
        assert chat(run, token).status_code == 200
        [service] = [s for s in DaemonClient(inputs.root).services()["services"] if s["service_id"] == run["service_id"]]
        psutil.Process(service["pid"]).kill()
        end = time.monotonic() + WAIT_S
        codes: list[str] = []
        while time.monotonic() < end:
            reply = chat(run, token)  # the timeout bounds each attempt: an error, never a hang
            assert reply.status_code >= 400
            codes.append(reply.json()["error"]["code"])
            if codes[-1] == "inference_binding_revoked":
                break
            time.sleep(0.1)
        assert codes[-1] == "inference_binding_revoked", codes
    finally:
        code = stop_serve(proc)
    assert code == 0, err.read_text()
