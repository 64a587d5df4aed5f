"""An operator's stop is an operator's stop (real daemon, real gateway, fake engine processes).

``hitch local stop --force`` under a live ``serve`` writes the run's terminal record first (``cancelled``,
``inference_service_stopped``, who and when), ends a stream in flight with that error as its last event (never a
silent cut), and ``serve`` exits non-zero saying who stopped it. ``hitch daemon stop`` without ``--force`` refuses
while a run holds a lease; a run's token after its end gets ``inference_binding_revoked``, never 401.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.app.daemon_client import DaemonClient
from harness.runtimes import get_runtime
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.daemon.serve_support import chat, serve_process, stop_serve
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs

pytestmark = pytest.mark.integration


def test_a_forced_service_stop_under_serve_cancels_the_run_and_serve_exits_saying_who(
    inputs: ServiceInputs, tmp_path: Path
) -> None:
    as_json(hitch(inputs.root, "daemon", "start", "--json", *FAST))
    proc, run, out, err = serve_process(inputs.root, tmp_path, "--run-id", "op-serve")
    try:
        token = Path(run["token_file"]).read_text().strip()
        assert chat(run, token).status_code == 200
        refused = hitch(inputs.root, "daemon", "stop", "--json")  # a normal stop never cuts a run
        assert refused.returncode == 9 and json.loads(refused.stdout)["error"]["code"] == "inference_in_use", refused.stdout
        assert json.loads(refused.stdout)["error"]["details"]["owners"] == ["op-serve"]
        stopped = as_json(hitch(inputs.root, "local", "stop", run["service_id"], "--force", "--json"))
        assert stopped["stopped"] == [run["service_id"]]
        code = proc.wait(timeout=60)  # serve reads its run's record once a second
    finally:
        stop_serve(proc)
    assert code == 9, err.read_text()  # the lifecycle category's exit code
    said = json.loads("\n".join(out.read_text().splitlines()[1:]))["error"]  # --json: the run, then the error
    assert said["code"] == "inference_service_stopped" and "hitch local stop" in said["message"] and "op-serve" in said["message"]
    record = DaemonClient(inputs.root).run_record("op-serve")["record"]
    assert record["status"] == "cancelled" and record["error"]["code"] == "inference_service_stopped"
    assert record["stopped_by"]["reason"] == "operator_stop" and record["stopped_by"]["what"] == "service"
    assert "hitch local stop" in record["stopped_by"]["by"]
    after = chat(run, token)
    assert after.status_code == 403 and after.json()["error"]["code"] == "inference_binding_revoked"


def _run_body(run_id: str, *fake_flags: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "model": "local/tiny",
        "device": "cpu",
        "profile": "baseline",
        "runtime": get_runtime(GENERIC_RUNTIME).runtime_id,
        "engine": "fake",
        "fake_flags": list(fake_flags),
    }


def test_a_stream_in_flight_ends_with_the_stop_error_event_and_the_daemon_stop_records_the_operator(
    inputs: ServiceInputs,
) -> None:
    as_json(hitch(inputs.root, "daemon", "start", "--json", *FAST))
    client = DaemonClient(inputs.root)
    run = client.request("POST", "/v1/runs", _run_body("op-stream", "--fake-itl-ms", "400"), timeout_s=300)
    token = Path(run["token_file"]).read_text().strip()
    body = {"model": run["wire_model"], "messages": [{"role": "user", "content": "hello"}], "max_tokens": 200, "stream": True}
    lines: list[str] = []
    first = threading.Event()

    def read() -> None:
        with httpx.stream(
            "POST",
            f"{run['base_url']}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=120.0,
            trust_env=False,
        ) as resp:
            for line in resp.iter_lines():
                if line:
                    lines.append(line)
                    first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first.wait(120), "the stream sent nothing"
    client.stop_service(run["service_id"], force=True)
    reader.join(timeout=120)
    assert not reader.is_alive()
    assert lines[-1] == "data: [DONE]", lines[-3:]
    last = json.loads(lines[-2].removeprefix("data: "))  # chat's terminal error event, then [DONE], then the end
    assert last["error"]["code"] == "inference_service_stopped", lines[-3:]
    record = client.run_record("op-stream")["record"]
    assert record["status"] == "cancelled" and record["stopped_by"]["what"] == "service"
    rows = [json.loads(r) for r in (inputs.root.run_inference_dir("op-stream") / "attempts.jsonl").read_text().splitlines()]
    assert [r["error_code"] for r in rows if r["stream"]] == ["inference_service_stopped"]

    # a forced daemon stop under a live run: the run ends cancelled by the operator, not "interrupted"
    second = client.request("POST", "/v1/runs", _run_body("op-daemon"), timeout_s=300)
    assert second["status"] == "running"
    as_json(hitch(inputs.root, "daemon", "stop", "--force", "--json"))
    kept = json.loads((inputs.root.runs / "op-daemon" / "run.json").read_text())
    assert kept["status"] == "cancelled" and kept["stopped_by"]["what"] == "daemon"
    assert kept["error"]["code"] == "inference_service_stopped"
