"""``scripts/device/cuda_certify.sh``: its GPU path runs only on a GPU machine; here, where NVML finds no driver,
it must stop after the doctor with that reason, before installing the ~4.4 GB CUDA runtime or running pytest."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.devices import probe_cuda

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "device" / "cuda_certify.sh"


def test_the_script_parses() -> None:
    assert SCRIPT.stat().st_mode & 0o100
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)


@pytest.mark.skipif(probe_cuda().available, reason="a GPU machine: the script would certify it")
@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "hitch").exists(), reason="needs the project's .venv (make venv)")
def test_without_a_driver_the_script_stops_after_the_doctor(tmp_path: Path) -> None:
    env = {**os.environ, "HITCH_ROOT": str(tmp_path / "root"), "REPORT_DIR": str(tmp_path / "out")}
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "NVML sees no usable NVIDIA driver/GPU: nothing to certify on cuda" in proc.stderr
    doctor = json.loads((tmp_path / "out" / "doctor.json").read_text())
    assert doctor["cuda"]["available"] is False and "no NVIDIA driver" in doctor["cuda"]["reason"]
    assert not (tmp_path / "out" / "runtime-install.json").exists()  # nothing installed, no pytest run
    assert not (tmp_path / "out" / "pytest.log").exists()
