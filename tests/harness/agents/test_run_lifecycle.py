"""Durable runs end to end: real daemon, real gateway, fake engine process.

Every way a run ends leaves ``runs/<id>/run.json`` with its terminal status and code, and evidence: a
completed run, a refused request, Ctrl-C on ``hitch run``, ``hitch run cancel``, an engine killed mid-request
and a daemon killed mid-run (found ``interrupted`` at the next start). The live cases hold a request in the
engine (``slow_headers``) and act only once ``run.json`` says ``running`` and the engine reports the request
active: conditions, never timing.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from gateway.capture_segments import read_captures
from harness.app.daemon_client import DaemonClient
from harness.contracts.events import RequestEvidenceV1
from harness.contracts.evidence import InferenceExecutionEvidenceV1
from harness.contracts.run import RunRecordV1
from harness.engine.redaction import SERVER_INFO_OBSERVATIONS
from harness.errors import ERROR_TABLE
from harness.paths import DaemonPaths, HitchRoot
from tests.harness.daemon.conftest import FAST, HITCH, as_json, hitch, inputs, leak_guard
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration
__all__ = ["inputs", "leak_guard"]  # the daemon tests' fixtures: a root holding local/tiny, the leak guard

_WAIT_S = 120.0
_MARK = "hold-this-request"
# the engine holds the request carrying the mark (its readiness probes pass); the test ends it
_HOLD = ("--fake-fault", f"slow_headers:t=600,match={_MARK}")


def _run_args(run_id: str, *extra: str, prompt: str = "hello", budget: str = "8") -> list[str]:
    return ["run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake",
            "--prompt", prompt, "--max-output-tokens", budget, "--run-id", run_id, *extra, "--json"]  # fmt: skip


def _record(root: HitchRoot, run_id: str) -> RunRecordV1 | None:
    path = root.runs / run_id / "run.json"
    return RunRecordV1.model_validate_json(path.read_text()) if path.is_file() else None


def _execution(root: HitchRoot, run_id: str) -> InferenceExecutionEvidenceV1:
    return InferenceExecutionEvidenceV1.model_validate_json((root.runs / run_id / "inference" / "execution.json").read_text())


def _rows(root: HitchRoot, run_id: str) -> list[RequestEvidenceV1]:
    text = (root.runs / run_id / "inference" / "attempts.jsonl").read_text()
    return [RequestEvidenceV1.model_validate_json(line) for line in text.splitlines()]


def _leases(root: HitchRoot) -> list[object]:
    return [lease for s in DaemonClient(root).services()["services"] for lease in s["leases"]]


def _wait(what: str, cond: Any, proc: subprocess.Popen[str] | None = None) -> Any:
    end = time.monotonic() + _WAIT_S
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"hitch run exited {proc.returncode} before {what}: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def _engine_pid(root: HitchRoot, service_id: str) -> int:
    for service in DaemonClient(root).services()["services"]:
        if service["service_id"] == service_id:
            return int(service["pid"])
    raise AssertionError(f"no service {service_id}")


def _request_held(pid: int) -> bool:
    """The engine's /metrics (no key needed) shows the Responses request active."""
    try:
        ports = {c.laddr.port for c in psutil.Process(pid).net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    except psutil.Error:
        return False
    for port in ports:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0, trust_env=False).text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            if line.startswith('sglang:http_requests_active{endpoint="/v1/responses",method="POST"}'):
                return float(line.rsplit(" ", 1)[1]) >= 1
    return False


def _default_sigint() -> None:
    """Ctrl-C reaches ``hitch run`` as in a terminal, however the suite was launched: a shell's background job
    (``make test &``, nohup) ignores SIGINT, children inherit that, and Python then installs no handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_held_run(root: HitchRoot, run_id: str, tmp_path: Path) -> tuple[subprocess.Popen[str], RunRecordV1, int]:
    """``hitch run`` in the background, returned once its request is held inside the engine."""
    proc = subprocess.Popen(
        [*HITCH, *_run_args(run_id, *_HOLD, prompt=_MARK), "--root", str(root.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=_default_sigint,
    )
    record = _wait("run.json running", lambda: (r := _record(root, run_id)) is not None and r.status == "running" and r, proc)
    assert record.service_id is not None
    pid = _engine_pid(root, record.service_id)
    _wait("the request held in the engine", lambda: _request_held(pid), proc)
    return proc, record, pid


def _error_of(proc: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # never leave a live `hitch run` (and its pipes) to be collected during another test
        proc.communicate()
        raise
    assert proc.returncode != 0, out + err
    error: dict[str, Any] = json.loads(out)["error"]
    return error


def _assert_ended(root: HitchRoot, run_id: str, status: str, code: str) -> RunRecordV1:
    record = _record(root, run_id)
    assert record is not None and record.status == status, record
    assert record.error is not None and record.error.code == code, record.error
    assert [t.status for t in record.history] == ["admitted", "preparing", "running", status]
    return record


def test_completed_run_evidence_is_derived_from_the_attempt_rows_and_only_the_same_request_answers_the_record(
    inputs: ServiceInputs,
) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    out = as_json(hitch(root, *_run_args("ok-1", "--capture", "full")))
    assert out["record"]["status"] == "completed"
    record = _record(root, "ok-1")
    assert record is not None and record.status == "completed" and record.error is None and record.evidence_complete
    assert [t.status for t in record.history] == ["admitted", "preparing", "running", "completed"]
    ev = root.runs / "ok-1" / "inference"
    execution = _execution(root, "ok-1")
    rows = _rows(root, "ok-1")
    # the request count and the totals are the rows' own, and the digest is the rows file's
    assert execution.requests == len(rows) == 1 and rows[0].status in ("completed", "incomplete")
    assert execution.attempts.digest == "sha256:" + hashlib.sha256((ev / "attempts.jsonl").read_bytes()).hexdigest()
    assert execution.attempts.input_tokens == rows[0].input_tokens and execution.attempts.output_tokens == rows[0].output_tokens
    assert rows[0].engine_rid and execution.complete and execution.incomplete_code is None
    assert {c.name for c in execution.checks} == {"attempts_recorded", "capture_complete", "no_writer_error"}
    # the engine's own facts (no key anywhere), the machine, the binding, the serving metrics at both ends
    info = execution.observed["server_info"]
    assert info["served_model_name"] == execution.binding.wire_model
    assert set(info) <= set(SERVER_INFO_OBSERVATIONS) and "launch_command" not in info  # an allow-list
    keys = [p.read_text().strip() for p in root.private.rglob("*api-key")]
    # prepare's probe start and the sealed start each had their own engine and admin keys
    assert len(keys) == 4 and not [k for k in keys if k in (ev / "execution.json").read_text()]
    assert execution.hardware["device"] == "cpu" and execution.hardware["cpu"]["logical_cores"] >= 1
    assert execution.binding.run_id == "ok-1" and execution.binding.state == "revoked"
    metrics = execution.serving_metrics
    assert metrics.start_file and metrics.end_file and metrics.start_at is not None and metrics.end_at is not None
    assert "sglang:" in (ev / metrics.end_file).read_text()
    # --capture full: the payloads, 0600, under the run
    assert stat.S_IMODE((ev / "capture").stat().st_mode) == 0o700
    folder = ev / "capture" / execution.binding.binding_id
    captured = sorted(folder.iterdir())
    assert [p.name for p in captured] == ["index.jsonl", "segment-00000.bin"]  # no file per request
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in captured)
    assert all(json.loads(request)["input"] for _, request, _ in read_captures(folder))
    attempts = [json.loads(line) for line in (ev / "attempts.jsonl").read_text().splitlines()]
    assert attempts and all(row["request_sha256"] and row["response_sha256"] for row in attempts)
    assert _leases(root) == []
    # the same request under the same run id: the same record, nothing runs again
    before = (root.runs / "ok-1" / "run.json").read_bytes()
    again = as_json(hitch(root, *_run_args("ok-1", "--capture", "full")))
    assert again["kind"] == "run-record" and again["record"] == json.loads(before)
    # another request under it (another --capture; another prompt): a structured conflict, nothing runs
    for extra, prompt, differs in (((), "hello", "capture"), (("--capture", "full"), "bye", "submission")):
        refused = hitch(root, *_run_args("ok-1", *extra, prompt=prompt))
        assert refused.returncode == ERROR_TABLE["run_conflict"].exit_code, refused.stderr
        error = json.loads(refused.stdout)["error"]
        assert error["code"] == "run_conflict" and error["details"]["differs"] == [differs], error
    assert (root.runs / "ok-1" / "run.json").read_bytes() == before and len(_rows(root, "ok-1")) == 1


def test_refused_requests_fail_with_their_code_and_leave_evidence(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    # refused by the gateway (the prompt does not fit the context): one rejected attempt row
    long = hitch(root, *_run_args("refused-1", prompt="\u20ac\u00a7" * 5000))
    assert json.loads(long.stdout)["error"]["code"] == "inference_context_exceeded"
    _assert_ended(root, "refused-1", "failed", "inference_context_exceeded")
    rows = _rows(root, "refused-1")
    assert [(r.status, r.error_code) for r in rows] == [("rejected", "inference_context_exceeded")]
    assert _execution(root, "refused-1").requests == 1 and _execution(root, "refused-1").status == "failed"
    # refused before anything is sent (over the lock's budget): no row, still a record and evidence
    over = hitch(root, *_run_args("refused-2", budget="999999"))
    assert json.loads(over.stdout)["error"]["code"] == "inference_parameter_conflict"
    _assert_ended(root, "refused-2", "failed", "inference_parameter_conflict")
    assert _rows(root, "refused-2") == [] and _execution(root, "refused-2").complete
    assert json.loads((root.runs / "refused-2" / "inference" / "result.json").read_text())["error"]["code"] == (
        "inference_parameter_conflict"
    )
    assert _leases(root) == []


def test_ctrl_c_on_hitch_run_cancels_the_run(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    proc, record, _ = _start_held_run(root, "sigint-1", tmp_path)
    proc.send_signal(signal.SIGINT)
    assert _error_of(proc)["code"] == "run_cancelled"
    _assert_ended(root, "sigint-1", "cancelled", "run_cancelled")
    assert [r.status for r in _rows(root, "sigint-1")] == ["cancelled"]
    assert _execution(root, "sigint-1").complete
    token_file = root.gateway_dir / "private" / f"{record.binding_id}.token"
    assert record.binding_id is not None and not token_file.exists()
    assert _leases(root) == []


def test_hitch_run_cancel_revokes_the_binding_and_releases_the_lease(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    proc, _, _ = _start_held_run(root, "cancel-1", tmp_path)
    out = as_json(hitch(root, "run", "cancel", "cancel-1", "--json"))
    assert out["record"]["status"] == "cancelled" and out["record"]["error"]["code"] == "run_cancelled"
    assert _leases(root) == [] and DaemonClient(root).request("GET", "/v1/runs")["runs"] == []
    assert _error_of(proc)["code"] == "run_cancelled"  # the harness's own end does not overwrite it
    _assert_ended(root, "cancel-1", "cancelled", "run_cancelled")
    assert [r.status for r in _rows(root, "cancel-1")] == ["cancelled"]
    assert as_json(hitch(root, "run", "cancel", "cancel-1", "--json"))["record"] == out["record"]  # idempotent


def test_an_engine_killed_mid_request_fails_the_run(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    proc, _, pid = _start_held_run(root, "crash-1", tmp_path)
    psutil.Process(pid).kill()
    assert _error_of(proc)["code"] == "inference_process_exited"
    _assert_ended(root, "crash-1", "failed", "inference_process_exited")
    rows = _rows(root, "crash-1")
    assert [(r.status, r.error_code) for r in rows] == [("failed", "inference_process_exited")]
    assert _execution(root, "crash-1").status == "failed"
    assert _leases(root) == []


def test_a_daemon_killed_mid_run_leaves_the_run_interrupted_at_the_next_start(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    proc, _, _ = _start_held_run(root, "killed-1", tmp_path)
    daemon_pid = json.loads(DaemonPaths(root).info.read_text())["pid"]
    os.kill(daemon_pid, signal.SIGKILL)
    error = _error_of(proc)
    assert error["code"] == "daemon_unavailable" and error["details"]["run_id"] == "killed-1"
    record = _record(root, "killed-1")
    assert record is not None and record.status == "running"  # nobody but a daemon ends a run
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    _assert_ended(root, "killed-1", "interrupted", "run_interrupted")
    execution = _execution(root, "killed-1")
    assert execution.status == "interrupted" and not execution.complete
    assert execution.incomplete_code == "inference_capture_incomplete"
    assert next(c for c in execution.checks if c.name == "attempts_recorded").ok is False


def test_a_capture_that_cannot_be_written_marks_the_evidence_incomplete(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    blocked = root.runs / "cap-1" / "inference"
    blocked.mkdir(parents=True)
    (blocked / "capture").write_text("not a folder")  # every capture write fails
    out = as_json(hitch(root, *_run_args("cap-1", "--capture", "full")))
    assert out["record"]["status"] == "completed" and out["record"]["evidence_complete"] is False
    execution = _execution(root, "cap-1")
    assert not execution.complete and execution.incomplete_code == "inference_capture_incomplete"
    failed = [c for c in execution.checks if not c.ok]
    assert [(c.name, c.code) for c in failed] == [("capture_complete", "inference_capture_incomplete")]
    # a capture truncated at its bound: the bytes kept stop there, the evidence says it is incomplete
    cut = as_json(hitch(root, *_run_args("cap-3", "--capture", "full", "--capture-max-bytes", "64")))
    assert cut["record"]["status"] == "completed" and cut["record"]["evidence_complete"] is False
    execution = _execution(root, "cap-3")
    assert execution.incomplete_code == "inference_capture_incomplete"
    assert [c.name for c in execution.checks if not c.ok] == ["capture_complete"]
    kept = list(read_captures(root.runs / "cap-3" / "inference" / "capture" / execution.binding.binding_id))
    assert kept and all(record["capture_truncated"] is True and record["response_bytes"] > 64 for record, _, _ in kept)
    assert all(len(request) <= 64 and len(response) <= 64 for _, request, response in kept)
    # --capture off stores no payload and nothing can be incomplete about it
    as_json(hitch(root, *_run_args("cap-2", "--capture", "off")))
    assert _execution(root, "cap-2").complete and not (root.runs / "cap-2" / "inference" / "capture").exists()


def test_a_forced_daemon_stop_mid_run_ends_it_cancelled_by_the_operator(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    proc, _, _ = _start_held_run(root, "forced-1", tmp_path)
    as_json(hitch(root, "daemon", "stop", "--force", "--json"))
    error = _error_of(proc)
    record = _assert_ended(root, "forced-1", "cancelled", "inference_service_stopped")
    assert record.stopped_by is not None and record.stopped_by.what == "daemon"
    assert record.stopped_by.by.startswith("hitch daemon stop --force (pid ")
    assert error["code"] == "inference_service_stopped", error  # what `hitch run` says is what the record says
    assert _execution(root, "forced-1").status == "cancelled"


def test_ctrl_c_while_the_run_is_being_prepared_still_ends_it_cancelled(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    proc = subprocess.Popen(
        [*HITCH, *_run_args("sigint-early", *_HOLD, prompt=_MARK), "--root", str(root.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=_default_sigint,
    )
    # a fresh root: the run prepares its lock first, and the signal arrives then (or later: same end)
    _wait("run.json preparing", lambda: (r := _record(root, "sigint-early")) is not None and r.status != "admitted", proc)
    proc.send_signal(signal.SIGINT)
    assert _error_of(proc)["code"] == "run_cancelled"
    _assert_ended(root, "sigint-early", "cancelled", "run_cancelled")
    assert _leases(root) == [] and DaemonClient(root).request("GET", "/v1/runs")["runs"] == []


def test_a_daemon_stopped_mid_run_ends_it_interrupted_with_its_evidence(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    status = as_json(hitch(root, "daemon", "start", "--json", *FAST))
    proc, _, _ = _start_held_run(root, "stopped-1", tmp_path)
    refused = hitch(root, "daemon", "stop", "--json")  # a normal stop drains: never while a run holds a lease
    assert json.loads(refused.stdout)["error"]["code"] == "inference_in_use"
    os.kill(status["pid"], signal.SIGTERM)  # a signal (a host going down), not an operator's stop: interrupted
    assert _error_of(proc)["code"] == "run_interrupted"
    _assert_ended(root, "stopped-1", "interrupted", "run_interrupted")
    execution = _execution(root, "stopped-1")
    assert execution.status == "interrupted" and execution.complete  # the daemon ended it and recorded everything
    assert [r.status for r in _rows(root, "stopped-1")] == ["cancelled"]
