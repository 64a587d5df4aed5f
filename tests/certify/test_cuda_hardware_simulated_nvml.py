"""The hardware suite on cuda with the fake engine and a *simulated* NVML (no GPU exists on this machine).

A daemon whose GPU inventory is a simulated NVML holding two GPUs serves ``pytest certify --device cuda
--engine fake -k hardware``: the service leases one UUID, the fake engine reports cuda, runs the lock's GPU
flags and serves requests at concurrency 1 and 8 through the gateway; the signed entry says the NVML was
simulated. The NVML memory check needs a real engine on a real GPU and does not apply here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from certify.options import REPORT_ENV, SESSION_ENV
from harness.app.daemon_client import start_daemon, stop_daemon
from harness.devices.nvml_sim import SIMULATED_NVML_ENV
from harness.paths import HitchRoot

REPO = Path(__file__).resolve().parents[2]
GPUS = ["GPU-5a5a5a5a-0000-4000-8000-00000000000a", "GPU-5a5a5a5a-0000-4000-8000-00000000000b"]
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("certify")]


def test_hardware_suite_on_cuda_with_fake_engine_and_simulated_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = tmp_path / "nvml.json"
    nvml.write_text(json.dumps({"gpus": [{"uuid": u} for u in GPUS]}))
    (tmp_path / "xdg").mkdir()
    root = HitchRoot(tmp_path / "root")
    monkeypatch.setenv(SIMULATED_NVML_ENV, str(nvml))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))  # a private GPU lease directory
    monkeypatch.setenv("HITCH_ROOT", str(root.path))
    for name in (REPORT_ENV, SESSION_ENV):
        monkeypatch.delenv(name, raising=False)
    # a CUDA lock asks for 4 CPU cores, more than this machine has: the daemon is told a larger ledger
    start_daemon(root, ["--capacity-cpu", "64", "--capacity-memory", str(1 << 40)])
    out = tmp_path / "out"
    try:
        cmd = [sys.executable, "-m", "pytest", "certify", "--device", "cuda", "--engine", "fake", "-k", "hardware"]
        cmd += ["--report-dir", str(out), "-p", "no:cacheprovider", "-q"]
        proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    finally:
        stop_daemon(root, timeout_s=60)
    results = json.loads((out / "results.json").read_text())
    checks = {c["id"]: c for c in results["checks"]}
    for cid in (
        "hardware.server_info.device",
        "hardware.service.allocation",
        "hardware.cuda.gpu_recorded",
        "hardware.cuda.kv_pool_and_graphs",
        "hardware.cuda.concurrency_1_and_8",
    ):
        assert checks[cid]["status"] == "passed", (cid, checks[cid], proc.stdout[-3000:])
    assert checks["hardware.service.allocation"]["details"]["allocation"]["gpu_uuid"] in GPUS
    assert [row[0] for row in checks["hardware.cuda.concurrency_1_and_8"]["details"]["results"]["8"]] == [200] * 8
    assert checks["hardware.cuda.nvml_engine_memory"]["status"] == "skipped"  # a real engine's memory: GPU only
    assert results["hardware"]["cuda"]["simulated"] is True
    assert results["level"] == "failed"  # only the hardware suite ran, on a simulated GPU
