"""``pytest certify`` from the outside: a full fake-engine session under xdist, and a partial one.

The full run shares one fake engine between two xdist workers through the daemon, reaches ``contract``,
writes results (with the session's timeline), a signed entry that verifies with the development key, the
HTML pages, and leaves no daemon or engine behind. A run that deselects a required check ends ``failed`` with
that check as reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from catalog.evidence import blob_path, read_index, verify_evidence
from catalog.signing import load_entry, verify_envelope
from certify.components import missing
from certify.options import REPORT_ENV, SESSION_ENV
from harness.app.daemon_client import daemon_running
from harness.contracts.timeline import CertificationTimelineV1, TimelineSpanV1
from harness.errors import HitchError
from harness.evals.harbor_install import harbor_install
from harness.paths import HitchRoot

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("certify")]


def run_certify(
    tmp_path: Path, *args: str, harbor_link: bool = True, env_extra: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path, HitchRoot]:
    root = HitchRoot(tmp_path / "root")
    harbor = harbor_install(HitchRoot.at()) if harbor_link else None
    if harbor is not None:  # the agents.harbor checks use the developer's Harbor instead of installing it again
        root.tool_envs.mkdir(parents=True)
        (root.tool_envs / "harbor").symlink_to(harbor.path.parent, target_is_directory=True)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in (REPORT_ENV, SESSION_ENV)}
    env["HITCH_ROOT"] = str(root.path)
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "pytest", "certify", "--engine", "fake", "--device", "cpu", "--report-dir", str(out)]
    cmd += ["-p", "no:cacheprovider", "-q", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    return proc, out, root


def _engines_of(root: HitchRoot) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(root.path) in cmdline and ("fixtures.fake_sglang" in cmdline or "harness.daemon" in cmdline):
            found.append(proc.info["pid"])
    return found


def _dev_keys(root: HitchRoot) -> list[Path]:
    from catalog.signing import dev_keys_dir, trusted_keys_dir

    return [trusted_keys_dir(), dev_keys_dir(root)]


def test_full_fake_session_under_xdist_is_contract_signed_and_cleaned_up(tmp_path: Path) -> None:
    # the agents.harbor checks run in a session of their own (below): beside the fault checks' private services
    # under xdist their trials' runs waited past the daemon's 60 s queue timeout for capacity on a loaded machine
    proc, out, root = run_certify(tmp_path, "-n", "2", harbor_link=False, env_extra={"HITCH_REQUIRE_HARBOR": "0"})
    tail = (proc.stdout + proc.stderr)[-6000:]
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    _assert_timeline(results, out, proc.stdout)  # whatever the level: the timeline is written either way
    failed = [c for c in results["checks"] if c["status"] == "failed"]
    # pytest's exit code counts every failed test; only an optional check (container OOM) may fail here
    assert proc.returncode == (1 if failed else 0), tail
    assert all(not c["required"] for c in failed), failed
    assert results["level"] == "contract", (results["reasons"], tail)
    required = [c for c in results["checks"] if c["required"]]
    assert required and all(c["status"] == "passed" for c in required)
    suites = {c["id"].split(".", 1)[0] for c in required}
    assert {"hardware", "protocol", "faults", "security", "lifecycle", "perf"} <= suites
    entries = sorted(out.glob("*.dsse.json"))
    assert len(entries) == 1
    verified = verify_envelope(load_entry(entries[0]), _dev_keys(root))
    assert verified.predicate["level"] == "contract" and verified.predicate["engine"] == "fake"
    assert verified.predicate["checks"] == results["checks"]
    assert "timeline" in results and "timeline" not in verified.predicate  # the entry claims what it claimed before
    # every evidence file the entry names is kept beside it, and re-hashes to the signed digest
    evidence = verified.predicate["evidence"]
    assert "hardware.doctor.fingerprint/doctor.json" in evidence
    assert verify_evidence(evidence, out) == len(evidence)
    assert {f.name for f in read_index(out).files} == set(evidence)
    blob = blob_path(out / "evidence", evidence["hardware.doctor.fingerprint/doctor.json"])
    blob.write_bytes(blob.read_bytes()[:-1] + bytes([blob.read_bytes()[-1] ^ 1]))
    with pytest.raises(HitchError) as exc:
        verify_evidence(evidence, out)
    assert exc.value.code == "catalog_evidence_invalid"
    assert list(out.glob("*.html")), "no HTML page written"
    assert "level: contract" in proc.stdout
    assert daemon_running(root) is None and _engines_of(root) == []


def _assert_timeline(results: dict[str, Any], out: Path, stdout: str) -> None:
    """results.json's timeline (beside the predicate, not in it): a span per check that ran, in the worker that ran
    it, with the engine it used; the fixtures' setups (and teardowns), the steps inside them; the run page draws it."""
    timeline = CertificationTimelineV1.model_validate(results["timeline"])
    spans = timeline.spans
    assert spans and all(timeline.started_at <= s.start <= s.end <= timeline.ended_at for s in spans)
    checks = {s.name: s for s in spans if s.kind == "check"}
    ran = {c["id"] for c in results["checks"] if c["status"] in ("passed", "failed")}
    assert ran <= set(checks), ran - set(checks)
    assert {checks[c].worker for c in ran} >= {"gw0", "gw1"}
    scan = checks["security.secrets.logs"]
    assert (scan.worker, scan.phase, scan.engine) == ("main", "session_end", "none")
    assert checks["protocol.responses.nonstream"].engine == "session"
    assert checks["faults.crash_mid_stream.service_failed"].engine == "private"
    for s in checks.values():  # the check's span is its call phase, in the process its fixtures ran in
        assert s.check == s.name and (s.phase == "call" or s.worker == "main")

    def inside(inner: TimelineSpanV1, outer: TimelineSpanV1) -> bool:
        return inner.pid == outer.pid and outer.start <= inner.start and inner.end <= outer.end

    envs = [s for s in spans if s.kind == "fixture" and s.name == "certify_env" and s.phase == "setup"]
    assert {s.worker for s in envs} == {"gw0", "gw1"} and all(s.scope == "session" and s.engine == "session" for s in envs)
    starts = [s for s in spans if s.kind == "step" and s.name.startswith("session engine start")]
    assert len(starts) == 2 and all(any(inside(st, env) for env in envs) for st in starts)
    daemons = [s for s in spans if s.kind == "fixture" and s.name == "private_daemon"]
    assert {s.phase for s in daemons} == {"setup", "teardown"} and all(s.engine == "private" for s in daemons)
    private = [s for s in spans if s.kind == "step" and s.name == "private daemon start"]
    # each process's private daemon starts inside its fixture's setup (a check may restart it later)
    assert all(any(inside(p, d) for p in private) for d in daemons if d.phase == "setup")
    steps = [s for s in spans if s.kind == "step"]  # every step lies inside the fixture or check that ran it
    assert steps and all(any(inside(st, o) for o in spans if o.kind in ("fixture", "check")) for st in steps)
    assert any(s.kind == "wait" and s.name == "_shared_engine_turn" for s in spans)
    # a check that holds the session engine alone overlaps nothing of another worker that uses it: no check, and no
    # module fixture's setup (the lifecycle suite's two runs once sent their requests into a fault check's count)
    assert any(s.kind == "fixture" and s.name == "reuse" and s.engine == "session" for s in spans)
    alone = [s for s in checks.values() if s.name.startswith(("faults.inband_error.", "faults.split_utf8", "faults.coalesce"))]
    users = [s for s in spans if s.engine == "session" and (s.kind == "check" or (s.kind == "fixture" and s.phase == "setup"))]
    for a in alone:
        beside = [u.name for u in users if u.pid != a.pid and u.start < a.end and a.start < u.end]
        assert not beside, (a.name, beside)
    assert any(s.kind == "fixture" and s.name == "overhead" and s.scope == "module" for s in spans)  # the perf fixture
    # the timings ran in quiet phases, read but not enforced here (the other tests load the machine: conftest)
    quiet = {q.name: q for q in timeline.quiet}
    assert {"perf overhead", "protocol.cancel.stream", "lifecycle.idle.stop_after_ttl"} <= set(quiet), quiet
    assert all(q.verdict == "unguarded" and q.before_cores is not None and q.after_cores is not None for q in quiet.values())
    assert quiet["perf overhead"].check is not None and quiet["perf overhead"].check.startswith("perf.")
    page = (out / "run.html").read_text()
    assert 'data-chart="session-timeline"' in page and 'id="critical-path"' in page and 'id="quiet-phases"' in page
    assert "timeline: wall " in stdout and "critical path: " in stdout


def test_timings_taken_on_a_loaded_machine_are_refused_and_their_figures_not_recorded(tmp_path: Path) -> None:
    from tests.certify.test_quiet import burners

    with burners():  # two cores kept busy: far above a quarter of a core, whatever else this machine runs
        proc, out, _ = run_certify(
            tmp_path, "-k", "test_perf or test_cancel_stream", env_extra={"HITCH_CERTIFY_QUIET_LOAD": "0.25"}
        )
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    checks = {c["id"]: c for c in results["checks"]}
    timed = ["perf.overhead.e2e_bound", "perf.overhead.ttft_bound", "protocol.cancel.stream"]
    for cid in timed:
        assert checks[cid]["status"] == "failed", checks[cid]
        assert "timing refused" in checks[cid]["details"]["reason"], checks[cid]
    assert "--quiet-load 0.25" in checks["perf.overhead.e2e_bound"]["details"]["reason"]
    for name in ("gateway_added_latency_ms", "ttft_added_ms", "protocol.cancel.freed_s", "_overhead"):
        assert results["metrics"].get(name) is None, name  # a declared figure that was not taken reads null
    quiet = CertificationTimelineV1.model_validate(results["timeline"]).quiet
    assert {q.name for q in quiet} >= {"perf overhead", "protocol.cancel.stream"}
    assert all(q.verdict == "refused" and (q.before_cores or 0) > 0.25 for q in quiet)
    assert proc.returncode == 1 and results["level"] == "failed"


def test_a_deselected_required_check_fails_the_level(tmp_path: Path) -> None:
    proc, out, root = run_certify(tmp_path, "-k", "hardware and not doctor")
    results = json.loads((out / "results.json").read_text())
    assert results["level"] == "failed"
    assert "hardware.doctor.fingerprint: required check not_run" in results["reasons"]
    passed = {c["id"] for c in results["checks"] if c["status"] == "passed"}
    assert "hardware.server_info.device" in passed
    assert daemon_running(root) is None and _engines_of(root) == []
    assert proc.returncode == 1, "a failed level must not exit 0 even when every check that ran passed"


def test_harbor_checks_pass_in_a_fake_session(tmp_path: Path) -> None:
    """The agents.harbor checks on the fake engine with the developer's Harbor: in-container trials share the
    session's service, reach only their own binding, a cancel mid-request is isolated, terminus-2 solves."""
    if harbor_install(HitchRoot.at()) is None:
        missing("harbor", "Harbor is not installed under HITCH_ROOT (make harbor)")
    proc, out, root = run_certify(tmp_path, "-n", "2", "-k", "harbor")
    rows = {c["id"]: c for c in json.loads((out / "results.json").read_text())["checks"] if c["id"].startswith("agents.harbor.")}
    ran = {"agents.harbor.shared_service", "agents.harbor.container_isolation", "agents.harbor.cancel_isolated",
           "agents.harbor.terminus_solves"}  # fmt: skip
    assert {k: (v["required"], v["status"]) for k, v in rows.items() if k in ran} == dict.fromkeys(ran, (True, "passed")), (
        proc.stdout + proc.stderr
    )[-4000:]
    assert rows["agents.harbor.real_model"]["status"] == "skipped"  # real SGLang only
    assert daemon_running(root) is None and _engines_of(root) == []


@pytest.mark.parametrize("required", ["1", "0"])
def test_harbor_checks_fail_when_required_and_harbor_is_missing(tmp_path: Path, required: str) -> None:
    """A root without Harbor: under HITCH_REQUIRE_HARBOR=1 the agents.harbor checks are required and fail
    (never skipped); without it they are optional and skipped with the reason."""
    proc, out, root = run_certify(
        tmp_path, "-k", "harbor_trials_share", harbor_link=False, env_extra={"HITCH_REQUIRE_HARBOR": required}
    )
    rows = {c["id"]: c for c in json.loads((out / "results.json").read_text())["checks"]}
    row = rows["agents.harbor.shared_service"]
    if required == "1":
        assert (row["required"], row["status"]) == (True, "failed"), row
        assert "HITCH_REQUIRE_HARBOR is set" in proc.stdout + proc.stderr
    else:
        assert (row["required"], row["status"]) == (False, "skipped"), row
    assert daemon_running(root) is None and _engines_of(root) == []
