"""``pytest certify --device cuda`` on a machine without a usable GPU fails closed (spec §8.1).

It stops before any suite with the doctor's reason in one line, starts no daemon and no engine (never the
fake engine, never a CPU fallback), and writes a ``failed`` signed entry whose first reason is that line.
Runs only where NVML finds no driver (this machine and CI); on a GPU machine the device script covers cuda.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.signing import dev_keys_dir, load_entry, verify_envelope
from certify.options import REPORT_ENV, SESSION_ENV
from harness.app.daemon_client import daemon_running
from harness.devices import probe_cuda
from harness.paths import HitchRoot

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(probe_cuda().available, reason="this machine has an NVIDIA driver: nothing fails closed")


# the xdist variant (three more pytest processes collecting certify) runs in `make test`, not `make check`
@pytest.mark.parametrize("xdist", [pytest.param((), id="serial"), pytest.param(("-n", "2"), id="xdist", marks=pytest.mark.slow)])
def test_cuda_without_a_driver_stops_before_the_suites_with_a_failed_signed_entry(tmp_path: Path, xdist: tuple[str, ...]) -> None:
    root = HitchRoot(tmp_path / "root")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in (REPORT_ENV, SESSION_ENV)}
    env["HITCH_ROOT"] = str(root.path)
    cmd = [sys.executable, "-m", "pytest", "certify", "--device", "cuda", "--report-dir", str(out), "-p", "no:cacheprovider"]
    proc = subprocess.run([*cmd, *xdist], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, text

    stop = [line for line in text.splitlines() if line.startswith("STOPPED before the suites:")]
    assert len(stop) == 1, text
    assert "--device cuda cannot run on this machine: no NVIDIA driver" in stop[0]
    assert "no tests ran" in text and "HitchError" not in text and "fake engine" not in text.replace("no fake engine", "")
    assert daemon_running(root) is None  # nothing was started

    entries = list(out.glob("*.dsse.json"))
    assert len(entries) == 1, text
    predicate = verify_envelope(load_entry(entries[0]), [dev_keys_dir(root)]).predicate
    assert predicate["level"] == "failed"
    assert predicate["device"] == "cuda" and predicate["engine"] == "sglang"
    assert predicate["reasons"][0] == f"the engine session failed: {stop[0].removeprefix('STOPPED before the suites: ')}"
    assert predicate["checks"] and {c["status"] for c in predicate["checks"]} == {"not_run"}
    assert predicate["hardware"]["cuda"]["available"] is False
    assert "no NVIDIA driver" in predicate["hardware"]["cuda"]["reason"]
    assert (out / "run.html").is_file()
