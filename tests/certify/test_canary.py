"""The hardware canary: comparison of signed entries (certify.canary), its script and its workflow file."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped,unused-ignore]

from catalog.signing import KeyPair, build_statement, generate_key, sign_envelope, subjects_from_predicate, write_entry
from certify.canary import main
from tests.reports.sample_data import overhead_metrics

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "gpu-canary.yml"
SCRIPT = REPO / "scripts" / "ci" / "canary.sh"


def predicate(
    *,
    p95: float = 3.0,
    failing: tuple[str, ...] = (),
    profile: str = "baseline",
    finished_at: str = "2026-11-01T00:00:00Z",
    **overhead: Any,
) -> dict[str, Any]:
    """A schema-3 predicate whose time in the gateway at p95 is ``p95`` ms (interval ± 5 %)."""
    ids = ("protocol.chat.stream", "faults.engine.kill", "perf.overhead.e2e_bound")
    return {
        "level": "failed" if failing else "provisional",
        "reasons": [],
        "suite_version": "1",
        "project_commit": "0" * 40,
        "device": "cuda",
        "engine": "sglang",
        "runtime_id": "sha256:" + "1" * 64,
        "model_id": "sha256:" + "2" * 64,
        "inference_id": "sha256:" + "3" * 64,
        "profile": profile,
        "hardware": {},
        "checks": [
            {"id": cid, "status": "failed" if cid in failing else "passed", "required": True, "duration_s": 0.0, "details": {}}
            for cid in ids
        ],
        "metrics": overhead_metrics(p95, **overhead),
        "evidence": {},
        "finished_at": finished_at,
    }


def sign(pred: dict[str, Any], key: KeyPair, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return write_entry(sign_envelope(build_statement(pred, subjects_from_predicate(pred)), key.private_key), directory)


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    return generate_key(tmp_path / "keys" / "signer.pem")


def canary(entry: Path, history: Path, key: KeyPair, *extra: str) -> int:
    return main(["--entry", str(entry), "--history", str(history), "--keys", str(key.public_key.parent), *extra])


def canary_verdict(entry: Path, history: Path, key: KeyPair, out_file: Path) -> tuple[int, dict[str, Any]]:
    """The exit status of a canary run told to write its verdict (``--out``), and that verdict."""
    status = canary(entry, history, key, "--out", str(out_file))
    return status, json.loads(out_file.read_text())


def test_newly_failing_check_is_a_regression(tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]) -> None:
    sign(predicate(), key, tmp_path / "history")
    new = sign(predicate(failing=("faults.engine.kill",), finished_at="2026-11-02T00:00:00Z"), key, tmp_path / "new")
    status, verdict = canary_verdict(new, tmp_path / "history", key, tmp_path / "verdict.json")
    assert status == 1
    out = capsys.readouterr().out
    assert "faults.engine.kill" in out and "REGRESSION" in out
    assert verdict["regressed"] is True
    assert verdict["regressions"] == ["level: failed", "faults.engine.kill: passed before, failed now"]


def test_p95_worse_by_more_than_20_percent_is_a_regression(
    tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    sign(predicate(p95=3.0), key, tmp_path / "history")
    new = sign(predicate(p95=3.7, finished_at="2026-11-02T00:00:00Z"), key, tmp_path / "new")
    assert canary(new, tmp_path / "history", key) == 1
    out = capsys.readouterr().out
    assert "gateway_added_latency_ms.unary.residence_ms.p95 (time in the gateway): 3.700 ms > 3.600 ms" in out
    assert "gateway_added_latency_ms.stream.residence_ms.p95" in out
    # within 20 %: no regression; and a noise floor larger than the increase forgives it
    within = sign(predicate(p95=3.5, finished_at="2026-11-03T00:00:00Z"), key, tmp_path / "new2")
    assert canary(within, tmp_path / "history", key) == 0
    assert canary(new, tmp_path / "history", key, "--min-p95-delta-ms", "1.0") == 0


def test_an_increase_inside_the_baseline_s_interval_is_noise_not_a_regression(tmp_path: Path, key: KeyPair) -> None:
    sign(predicate(p95=3.0), key, tmp_path / "history")  # [2.85, 3.15]
    new = predicate(p95=3.7, finished_at="2026-11-02T00:00:00Z")
    for kind in ("unary", "stream"):  # 23 % up, but its interval reaches into the baseline's
        new["metrics"]["gateway_added_latency_ms"][kind]["residence_ms"]["p95"]["low"] = 3.1
    status, verdict = canary_verdict(sign(new, key, tmp_path / "new"), tmp_path / "history", key, tmp_path / "v.json")
    assert (status, verdict["regressions"]) == (0, [])


def test_the_decided_verdicts_turning_are_regressions_and_the_black_box_difference_is_not_compared(
    tmp_path: Path, key: KeyPair
) -> None:
    sign(predicate(), key, tmp_path / "history")
    # the black-box difference jumps from +34 ms to +300 ms: the engine's variance, never compared
    noisy = sign(predicate(difference_p50=300.0, finished_at="2026-11-02T00:00:00Z"), key, tmp_path / "noisy")
    status, verdict = canary_verdict(noisy, tmp_path / "history", key, tmp_path / "v1.json")
    assert (status, verdict["regressions"]) == (0, [])
    turned = sign(predicate(verdict="over", paired="missed", finished_at="2026-11-03T00:00:00Z"), key, tmp_path / "over")
    status, verdict = canary_verdict(turned, tmp_path / "history", key, tmp_path / "v2.json")
    assert status == 1
    assert verdict["regressions"] == [
        f"gateway_added_latency_ms.{kind} {label}"
        for kind in ("unary", "stream")
        for label in (
            "§15.4: within before, over now: p95: time in the gateway 30 ms, 95 % interval [28, 32] ms over 20.00 ms",
            "paired shift target: met before, missed now",
        )
    ]


def test_a_schema_2_baseline_is_read_and_its_difference_never_compared(
    tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    old = {**predicate(), "schema_version": "2", "metrics": {"gateway_added_latency_ms": {"p50": 0.1, "p95": 0.2, "p99": 0.3}}}
    baseline = sign(old, key, tmp_path / "history")
    assert json.loads(base64.b64decode(json.loads(baseline.read_text())["payload"]))["predicateType"].endswith("/v2")
    new = sign(predicate(p95=50.0, finished_at="2026-11-02T00:00:00Z"), key, tmp_path / "new")
    status, verdict = canary_verdict(new, tmp_path / "history", key, tmp_path / "v.json")
    assert (status, verdict["baseline"], verdict["regressions"]) == (0, str(baseline), [])
    assert any("the baseline has no decided overhead figure" in n for n in verdict["notes"])


def test_improvement_passes(tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]) -> None:
    sign(predicate(p95=3.0, failing=("protocol.chat.stream",)), key, tmp_path / "history")
    new = sign(predicate(p95=1.0, finished_at="2026-11-02T00:00:00Z"), key, tmp_path / "new")
    assert canary(new, tmp_path / "history", key) == 0
    out = capsys.readouterr().out
    assert "fixed" in out and "RESULT: no regression" in out


def test_the_latest_matching_entry_is_the_baseline(tmp_path: Path, key: KeyPair) -> None:
    history = tmp_path / "history"
    sign(predicate(failing=("faults.engine.kill",), finished_at="2026-10-01T00:00:00Z"), key, history)
    latest = sign(predicate(finished_at="2026-10-20T00:00:00Z"), key, history / "nested-artifact")
    new = sign(predicate(failing=("faults.engine.kill",), finished_at="2026-11-02T00:00:00Z"), key, tmp_path / "new")
    status, verdict = canary_verdict(new, history, key, tmp_path / "verdict.json")
    assert (status, verdict["baseline"]) == (1, str(latest))


def test_other_profile_is_ignored(tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]) -> None:
    sign(predicate(profile="throughput", p95=1.0), key, tmp_path / "history")
    new = sign(predicate(p95=50.0), key, tmp_path / "new")
    assert canary(new, tmp_path / "history", key) == 0
    assert "no previous verified entry" in capsys.readouterr().out


def test_the_new_entry_in_the_history_is_not_its_own_baseline(
    tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    new = sign(predicate(), key, tmp_path / "history")
    assert canary(new, tmp_path / "history", key) == 0
    assert "no previous verified entry" in capsys.readouterr().out


def test_failed_entry_without_a_baseline_fails(tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]) -> None:
    pred = {**predicate(failing=("faults.engine.kill",)), "reasons": ["faults.engine.kill: required check failed"]}
    new = sign(pred, key, tmp_path / "new")
    status, verdict = canary_verdict(new, tmp_path / "empty-history", key, tmp_path / "verdict.json")
    assert status == 1
    out = capsys.readouterr().out
    assert "no previous verified entry" in out and "RESULT: REGRESSION (1)" in out
    assert verdict["baseline"] is None
    assert verdict["regressions"] == ["level: failed (faults.engine.kill: required check failed)"]


def test_a_combination_that_stays_failed_fails_every_time(tmp_path: Path, key: KeyPair) -> None:
    history = tmp_path / "history"
    sign(predicate(failing=("faults.engine.kill",), finished_at="2026-10-01T00:00:00Z"), key, history)
    for day in ("02", "03"):  # the same failure, run after run: never "no regression"
        new = sign(predicate(failing=("faults.engine.kill",), finished_at=f"2026-11-{day}T00:00:00Z"), key, tmp_path / day)
        status, verdict = canary_verdict(new, history, key, tmp_path / f"verdict-{day}.json")
        assert status == 1 and verdict["baseline"] is not None and verdict["regressions"] == ["level: failed"]
        sign(predicate(failing=("faults.engine.kill",), finished_at=f"2026-11-{day}T00:00:00Z"), key, history)


def test_a_passing_entry_without_a_baseline_passes(tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]) -> None:
    new = sign(predicate(), key, tmp_path / "new")
    assert canary(new, tmp_path / "empty-history", key) == 0
    assert "RESULT: no regression" in capsys.readouterr().out


def _tamper(path: Path) -> None:
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    for row in statement["predicate"]["checks"]:
        row["status"] = "passed"
    statement["predicate"]["metrics"]["gateway_added_latency_ms"]["unary"]["residence_ms"]["p95"]["estimate"] = 0.1
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(json.dumps(envelope))


def test_tampered_previous_entry_is_ignored_with_a_warning(
    tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "history"
    honest = sign(predicate(p95=3.0, failing=("faults.engine.kill",), finished_at="2026-10-01T00:00:00Z"), key, history)
    tampered = sign(predicate(p95=3.0, failing=("faults.engine.kill",), finished_at="2026-10-30T00:00:00Z"), key, history)
    _tamper(tampered)  # would claim everything passed at 0.1 ms: a regression if it were trusted
    new = sign(predicate(p95=3.2, failing=("faults.engine.kill",), finished_at="2026-11-02T00:00:00Z"), key, tmp_path / "new")
    status, verdict = canary_verdict(new, history, key, tmp_path / "verdict.json")
    assert status == 1  # still failed: see the stays-failed test
    captured = capsys.readouterr()
    assert f"ignored {tampered}" in captured.err and "does not verify" in captured.err
    assert verdict["baseline"] == str(honest)
    # against the honest baseline the check was already failing and p95 is within 20 %: only the level counts
    assert [r.split(" ")[0] for r in verdict["regressions"]] == ["level:"]


def test_entry_signed_by_an_untrusted_key_is_ignored(tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]) -> None:
    stranger = generate_key(tmp_path / "stranger" / "signer.pem")
    sign(predicate(p95=1.0), stranger, tmp_path / "history")
    new = sign(predicate(p95=50.0), key, tmp_path / "new")
    assert canary(new, tmp_path / "history", key) == 0
    captured = capsys.readouterr()
    assert "signed by no trusted key" in captured.err
    assert "no previous verified entry" in captured.out


def test_unverifiable_new_entry_exits_2(tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]) -> None:
    sign(predicate(), key, tmp_path / "history")
    new = sign(predicate(failing=("faults.engine.kill",)), key, tmp_path / "new")
    _tamper(new)
    assert canary(new, tmp_path / "history", key) == 2
    assert "not usable" in capsys.readouterr().err


def test_module_runs_as_a_command(tmp_path: Path, key: KeyPair) -> None:
    sign(predicate(p95=3.0), key, tmp_path / "history")
    new = sign(predicate(p95=9.0, finished_at="2026-11-02T00:00:00Z"), key, tmp_path / "new")
    argv = ["--entry", str(new), "--history", str(tmp_path / "history"), "--keys", str(key.public_key.parent), "--json"]
    proc = subprocess.run([sys.executable, "-m", "certify.canary", *argv], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["regressions"][0].startswith("gateway_added_latency_ms.unary.residence_ms.p95")


# -- the script and the workflow --------------------------------------------------------------------


def test_workflow_parses_and_runs_the_script() -> None:
    data = yaml.safe_load(WORKFLOW.read_text())
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert "schedule" in triggers and triggers["schedule"][0]["cron"]
    assert "workflow_dispatch" in triggers
    job = data["jobs"]["canary"]
    assert job["runs-on"] == ["self-hosted", "linux", "x64", "gpu"]
    runs = [step.get("run", "") for step in job["steps"]]
    uses = [step.get("uses", "") for step in job["steps"]]
    assert any("scripts/ci/canary.sh" in r for r in runs)
    assert any(u.startswith("actions/checkout@") for u in uses)
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "${{ env.CANARY_ARTIFACTS_DIR }}"
    assert SCRIPT.is_file() and SCRIPT.stat().st_mode & stat.S_IXUSR


STUB = """#!/usr/bin/env bash
# stands in for the venv's python: `-m pytest` drops a prepared entry into --report-dir, the rest is real
if [[ "$1 $2" == "-m pytest" ]]; then
  while [[ $# -gt 0 ]]; do
    if [[ "$1" == "--report-dir" ]]; then cp "$STUB_ENTRY" "$2/"; fi
    shift
  done
  exit 1
fi
exec "$REAL_PY" "$@"
"""


@pytest.mark.parametrize("regressed", [False, True])
def test_script_compares_copies_artifacts_and_records_history(tmp_path: Path, key: KeyPair, regressed: bool) -> None:
    root = tmp_path / "root"
    (root / "keys").mkdir(parents=True)
    history = tmp_path / "history"
    sign(predicate(p95=3.0), key, history)
    new_pred = predicate(p95=9.0 if regressed else 2.0, finished_at="2026-11-02T00:00:00Z")
    new = sign(new_pred, key, tmp_path / "prepared")
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    report, artifacts = tmp_path / "report", tmp_path / "artifacts"
    env = {
        **os.environ,
        "PY": str(stub),
        "REAL_PY": sys.executable,
        "STUB_ENTRY": str(new),
        "HITCH_ROOT": str(root),
        "CANARY_REPORT_DIR": str(report),
        "CANARY_HISTORY_DIR": str(history),
        "CANARY_ARTIFACTS_DIR": str(artifacts),
        "CANARY_SIGN_KEY": str(key.private_key),
    }
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == (1 if regressed else 0), proc.stdout + proc.stderr
    assert (artifacts / new.name).is_file()
    assert (artifacts / report.name / "canary.json").is_file()
    assert json.loads((report / "canary.json").read_text())["regressed"] is regressed
    assert ((history / new.name).is_file()) is (not regressed)


def test_script_without_an_entry_exits_2(tmp_path: Path) -> None:
    stub = tmp_path / "python"
    stub.write_text("#!/usr/bin/env bash\nexit 3\n")
    stub.chmod(0o755)
    env = {
        **os.environ,
        "PY": str(stub),
        "HITCH_ROOT": str(tmp_path / "root"),
        "CANARY_REPORT_DIR": str(tmp_path / "report"),
        "CANARY_HISTORY_DIR": str(tmp_path / "history"),
        "CANARY_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
    }
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "expected one signed entry" in proc.stderr
