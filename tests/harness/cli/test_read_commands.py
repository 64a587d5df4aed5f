"""Reading what exists: ``hitch --version``, ``run list``, a human ``run show``, ``local status`` with the
service's model, engine, device, URL, uptime, owners and runs, and ``local logs`` (real daemon, fake engine)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.app.daemon_client import stop_daemon
from harness.errors import HitchError
from harness.paths import HitchRoot
from tests.harness.cli.cli_support import HITCH, error_json, hitch, ok_json

pytestmark = pytest.mark.integration

RUN = ("run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake")


@pytest.fixture(scope="module")
def ran(tiny_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the tiny root with one completed model-call run (``r-done``) on the fake engine."""
    root = tmp_path_factory.mktemp("ran") / "root"
    ok_json(hitch(root, "models", "add", str(tiny_root.parent / "tiny"), "--name", "tiny", "--json"))
    ok_json(hitch(root, *RUN, "--prompt", "hi", "--max-output-tokens", "8", "--run-id", "r-done", "--json"))
    yield root
    with contextlib.suppress(HitchError):
        stop_daemon(HitchRoot(root), timeout_s=60)


def test_version_names_the_package_commit_and_schema_versions() -> None:
    human = hitch(None, "--version")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].startswith("hitch ") and lines[1].startswith("commit: ") and len(lines[1]) > len("commit: ")
    assert "InferenceLockV1 1" in human.stdout and "RunRecordV1 1" in human.stdout
    out = ok_json(hitch(None, "version", "--json"))
    assert out["kind"] == "version" and out["cli_json_schema_version"] == "1"
    assert out["record_schema_versions"]["InferenceLockV1"] == "1" and out["version"] == lines[0].split()[1]


def test_run_list_shows_each_run_with_usage_and_filters(ran: Path) -> None:
    out = ok_json(hitch(ran, "run", "list", "--json"))
    (row,) = out["runs"]
    attempts = [json.loads(line) for line in (ran / "runs/r-done/inference/attempts.jsonl").read_text().splitlines()]
    assert row["run_id"] == "r-done" and row["harness"] == "model-call" and row["model"] == "local/tiny"
    assert row["status"] == "completed" and row["error_code"] is None and row["requests"] == len(attempts) == 1
    assert row["tokens"] == attempts[0]["input_tokens"] + attempts[0]["output_tokens"] and row["output_tokens"] <= 8
    assert row["started"].endswith("Z") and row["duration_s"] >= 0
    human = hitch(ran, "run", "list")
    header, line = human.stdout.splitlines()
    assert header.split() == ["RUN", "HARNESS", "MODEL", "STATUS", "STARTED", "(UTC)", "DURATION", "REQUESTS", "TOKENS"]
    assert line.split()[:5] == ["r-done", "model-call", "local/tiny", "completed", row["started"]]
    assert line.split()[-2:] == ["1", str(row["tokens"])]
    assert ok_json(hitch(ran, "run", "list", "--status", "failed", "--json"))["runs"] == []
    assert len(ok_json(hitch(ran, "run", "list", "--model", "tiny", "--json"))["runs"]) == 1
    assert ok_json(hitch(ran, "run", "list", "--model", "local/other", "--json"))["runs"] == []
    assert error_json(hitch(ran, "run", "list", "--status", "done", "--json"), 2)["code"] == "usage_error"


def test_run_show_is_for_a_person(ran: Path) -> None:
    record = json.loads((ran / "runs/r-done/run.json").read_text())
    human = hitch(ran, "run", "show", "r-done")
    assert human.returncode == 0, human.stderr
    fields = dict(line.split(":", 1) for line in human.stdout.splitlines())
    assert fields["model"].strip() == "local/tiny" and fields["inference"].strip() == record["inference_id"]
    assert fields["device"].strip().startswith("cpu  engine fake") and fields["status"].strip() == "completed"
    assert fields["usage"].strip().startswith("1 request(s)")
    assert fields["evidence"].strip() == str(ran / "runs/r-done/inference")
    out = ok_json(hitch(ran, "run", "show", "r-done", "--json"))
    assert out["record"] == record and out["summary"]["requests"] == 1
    missing = error_json(hitch(ran, "run", "show", "r-dne", "--json"), 2)
    assert missing["code"] == "run_not_found" and missing["details"]["did_you_mean"] == "r-done"


def test_local_logs_prints_the_engine_and_daemon_logs(ran: Path) -> None:
    engine = ok_json(hitch(ran, "local", "logs", "--json"))
    assert Path(engine["path"]).name == "engine.log" and Path(engine["path"]).parent.parent == ran / "inference/services"
    assert engine["text"] == Path(engine["path"]).read_text() and "request.finished" in engine["text"]
    human = hitch(ran, "local", "logs", Path(engine["path"]).parent.name)
    assert human.returncode == 0 and human.stdout == engine["text"] and engine["path"] in human.stderr
    daemon = ok_json(hitch(ran, "local", "logs", "--daemon", "--json"))
    assert daemon["path"] == str(ran / "inference/daemon/daemon.log") and daemon["text"]
    wrong = error_json(hitch(ran, "local", "logs", "svc-nope", "--json"), 2)
    assert wrong["code"] == "usage_error" and Path(engine["path"]).parent.name in wrong["details"]["choices"]


def _serve(root: Path, out: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    argv = [*HITCH, "local", "serve", "local/tiny", "--device", "cpu", "--engine", "fake", "--run-id", "s-live", "--json"]
    with out.open("w") as out_f:
        proc = subprocess.Popen([*argv, "--root", str(root)], stdout=out_f, stderr=subprocess.DEVNULL, text=True, env=os.environ)
    end = time.monotonic() + 120
    while time.monotonic() < end:  # a bound, not an assertion: serve prints its first line once it serves
        lines = out.read_text().splitlines()
        if lines:
            return proc, json.loads(lines[0])
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("serve printed nothing")


def test_local_status_names_model_engine_device_url_uptime_owners_and_runs(ran: Path, tmp_path: Path) -> None:
    proc, served = _serve(ran, tmp_path / "serve.out")
    try:
        out = ok_json(hitch(ran, "local", "status", "--json"))
        (svc,) = [s for s in out["services"] if s["owners"]]
        assert svc["model"] == "local/tiny" and svc["engine"] == "fake" and svc["launcher"] == "process"
        assert svc["device"] == "cpu" and svc["engine_url"].startswith("http://127.0.0.1:")
        assert svc["uptime_s"] >= 0 and svc["ready"].endswith("Z") and svc["owners"] == ["s-live"]
        assert svc["runs"] == [{"run_id": "s-live", "status": "running", "harness": "serve"}]
        human = hitch(ran, "local", "status").stdout
        assert f"{svc['service_id']}  ready  local/tiny" in human
        assert "fake (process launcher) on cpu" in human and f"url:       {svc['engine_url']}" in human
        assert "runs:      s-live (serve, running)" in human and "owners:    s-live" in human
        assert served["run_id"] == "s-live"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
