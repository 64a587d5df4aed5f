"""The secrets scan as a session-end check: it catches a planted secret, wherever the test order put it.

The security suite's two session-end checks (``security.secrets.files`` / ``.logs``) run on a root holding
the session's ledger and a private 0600 key file: clean, they pass; a secret planted in a non-private file, in
a 0644 file of a private folder, or in a log fails them, naming the file. The plugin's runner records each
under its check id, only for a suite the session ran, and always removes the ledger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from certify.evaluate import CheckResult
from certify.options import CertifyOptions
from certify.recorder import EndRecorder
from certify.registry import Check, session_end_checks
from certify.secrets_scan import remember, scan_files, session_secrets
from certify.session import SessionEnd, secrets_ledger
from certify.session_end import run_session_end_checks
from certify.state import CertifyState
from certify.suites.test_security import secrets_in_files, secrets_in_logs
from harness.paths import HitchRoot, atomic_write_bytes, write_secret

ENGINE_KEY = "engine-key-" + "k" * 24
RUN_TOKEN = "hitch-run-" + "t" * 32
SESSION = "0123456789abcdef"


def _options(tmp_path: Path) -> CertifyOptions:
    root = HitchRoot(tmp_path / "root")
    return CertifyOptions("cpu", "fake", None, "process", "fixture:tiny", "baseline", None, tmp_path / "out", False, root)


def _session(tmp_path: Path) -> SessionEnd:
    """A root as a session leaves it: the ledger, the engine key in its 0600 private file, a clean daemon log."""
    opts = _options(tmp_path)
    ledger = secrets_ledger(opts, SESSION)
    remember(ledger, "engine_key", ENGINE_KEY)
    remember(ledger, "run_token:certify-run", RUN_TOKEN)
    write_secret(opts.root.private / "svc-1" / "engine-api-key", ENGINE_KEY)
    atomic_write_bytes(opts.root.daemon_dir / "daemon.log", b"daemon started\n")
    atomic_write_bytes(opts.root.path / "inference" / "gateway" / "bindings.json", b'{"token_sha256": "..."}')
    return SessionEnd(opts, {"service_id": "svc-1"}, ledger)


def _run(fn: Any, end: SessionEnd) -> EndRecorder:
    recorder = EndRecorder()
    fn(end, recorder)
    return recorder


def test_a_clean_root_passes_both_checks_and_the_ledger_is_not_scanned(tmp_path: Path) -> None:
    end = _session(tmp_path)
    files = _run(secrets_in_files, end)
    assert files.details["secrets_looked_for"] == ["engine_key", "run_token:certify-run"]
    logs = _run(secrets_in_logs, end)
    assert logs.details["logs"] == ["inference/daemon/daemon.log"]
    # the ledger's own files would prove the needles right by themselves: they are left out
    needles = session_secrets(end.ledger, end.root, None)
    evidence = end.options.report_dir / "evidence"
    with_ledger = scan_files(end.root, evidence, needles, logs=False)
    without = scan_files(end.root, evidence, needles, logs=False, leave_out=(end.ledger,))
    assert (with_ledger.private_hits, without.private_hits) == (3, 1)


@pytest.mark.parametrize(
    ("where", "mode"),
    [("inference/gateway/state.json", 0o644), ("inference/private/svc-1/copy-of-key", 0o644), ("cache/notes.txt", 0o600)],
)
def test_a_planted_secret_in_a_file_fails_files(tmp_path: Path, where: str, mode: int) -> None:
    end = _session(tmp_path)
    atomic_write_bytes(end.root.path / where, f"token={RUN_TOKEN}".encode(), mode=mode)
    with pytest.raises(AssertionError, match="secrets found outside the 0600 private files") as exc:
        _run(secrets_in_files, end)
    assert where in str(exc.value) and "run_token:certify-run" in str(exc.value)


def test_a_planted_secret_in_the_evidence_store_fails_files(tmp_path: Path) -> None:
    end = _session(tmp_path)
    atomic_write_bytes(end.options.report_dir / "evidence" / "ab" / "blob", ENGINE_KEY.encode())
    with pytest.raises(AssertionError, match="evidence/ab/blob"):
        _run(secrets_in_files, end)


def test_a_planted_secret_in_a_log_fails_logs(tmp_path: Path) -> None:
    end = _session(tmp_path)
    atomic_write_bytes(end.root.services / "svc-1" / "engine.log", f"Bearer {ENGINE_KEY}\n".encode())
    with pytest.raises(AssertionError, match=r"secrets found in logs: \['inference/services/svc-1/engine.log"):
        _run(secrets_in_logs, end)
    _run(secrets_in_files, end)  # a log is the logs check's, not the files check's


def test_the_admin_key_is_looked_for(tmp_path: Path) -> None:
    end = _session(tmp_path)
    write_secret(end.root.private / "svc-1" / "admin-api-key", "admin-" + "a" * 20)
    atomic_write_bytes(end.root.path / "leak.txt", ("admin-" + "a" * 20).encode())
    with pytest.raises(AssertionError, match=r"leak\.txt.*admin_key"):
        _run(secrets_in_files, end)


def test_wrong_needles_fail_files(tmp_path: Path) -> None:
    """With no private file holding any needle the scan proves nothing: the check fails instead of passing."""
    end = _session(tmp_path)
    (end.root.private / "svc-1" / "engine-api-key").unlink()
    with pytest.raises(AssertionError, match="looks for the wrong bytes"):
        _run(secrets_in_files, end)


def test_the_security_suite_declares_both_scans_at_session_end() -> None:
    assert sorted(spec.id for spec, _ in session_end_checks()) == ["security.secrets.files", "security.secrets.logs"]


def _passing(end: SessionEnd, record: EndRecorder) -> None:
    record.detail("root", str(end.root.path))


def _leaking(end: SessionEnd, record: EndRecorder) -> None:
    raise AssertionError("secrets found in logs: ['x.log']")


def test_the_runner_records_results_under_their_ids_for_the_suites_that_ran(tmp_path: Path) -> None:
    end = _session(tmp_path)
    state = CertifyState(is_worker=False, session_key=SESSION)
    state.results["security.routes.allow_list"] = CheckResult("security.routes.allow_list", "passed")
    checks = [
        (Check("security.secrets.files"), _passing),
        (Check("security.secrets.logs"), _leaking),
        (Check("security.cuda_only", devices=frozenset({"cuda"}), reason="needs a GPU"), _passing),
        (Check("perf.at_end"), _passing),  # the perf suite did not run in this session
    ]
    failed = run_session_end_checks(state, end.options, checks)
    assert state.results["security.secrets.files"].status == "passed"
    assert state.results["security.secrets.files"].details == {"root": str(end.root.path)}
    assert state.results["security.secrets.logs"].status == "failed"
    assert "secrets found in logs" in state.results["security.secrets.logs"].details["reason"]
    assert state.results["security.cuda_only"].status == "skipped"
    assert "needs a GPU" in state.results["security.cuda_only"].details["reason"]
    assert "perf.at_end" not in state.results
    assert failed == ["security.secrets.logs (at session end) failed: AssertionError: secrets found in logs: ['x.log']"]
    assert not end.ledger.parent.exists(), "the ledger outlived the session"
