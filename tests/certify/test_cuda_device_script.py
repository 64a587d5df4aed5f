"""``scripts/device/cuda_certify.sh``: its GPU path runs only on a GPU machine; here, where NVML finds no driver,
it must stop after the doctor with that reason, before installing the ~4.4 GB CUDA runtime or running pytest.
Its ``--dry-run`` goes through every step here (on a simulated NVML) and stops before anything is installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from harness.devices import probe_cuda
from harness.devices.nvml_sim import SIMULATED_NVML_ENV
from harness.paths import HitchRoot
from harness.runtimes import runtime_source_dir
from harness.runtimes.catalog import requirement_pins
from tests.components import installed_sglang

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


SIMULATED_GPU = "GPU-00000000-0000-4000-8000-0000000000d1"  # the one H200 the dry run's simulated NVML holds


@pytest.mark.integration
@pytest.mark.needs_sglang
@pytest.mark.slow
@pytest.mark.skipif(probe_cuda().available, reason="a GPU machine: the dry run reads the real NVML there")
@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "hitch").exists(), reason="needs the project's .venv (make venv)")
def test_the_dry_run_goes_through_every_step_and_stops_before_the_engine(tmp_path: Path) -> None:
    installed_sglang()  # its SGLang (the CUDA runtime's version) reads the CUDA command line
    root, out = tmp_path / "root", tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != SIMULATED_NVML_ENV}
    env.update(HITCH_ROOT=str(root), REPORT_DIR=str(out), MODEL="fixture:tiny", SGLANG_PARSER_ROOT=str(HitchRoot.at().path))
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "-k", "hardware"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    steps = re.findall(r"^== \[\s*\d+s\] (.*)$", proc.stdout, re.M)
    assert steps == [
        "machine",
        "project venv",
        "doctor (cuda)",
        "CUDA runtime sglang-0.5.23-cuda: install plan (nothing downloaded)",
        "model fixture:tiny (imported into HITCH_ROOT)",
        "lock (draft: device cuda, runtime sglang-0.5.23-cuda)",
        "engine command line of the first (probe) start",
        "pytest certify --device cuda --model fixture:tiny (not run)",
        "dry run: stopped before installing sglang-0.5.23-cuda and starting the engine (nothing installed, no GPU used)",
    ], text[-6000:]
    # the doctor's inventory: the simulated NVML, said so
    assert "the inventory below comes from a simulated NVML" in proc.stdout and SIMULATED_GPU in proc.stdout
    assert json.loads((out / "doctor.json").read_text())["cuda"]["simulated"] is True
    # the install plan: every pin of the lock, with its size, from the index
    plan = re.search(r"^sglang-0\.5\.23-cuda: (\d+) pinned wheels, ([\d.]+) GB to download \(asked (\S+),", proc.stdout, re.M)
    assert plan is not None, proc.stdout
    pins = requirement_pins((runtime_source_dir("sglang-0.5.23-cuda") / "requirements.lock").read_text())
    assert int(plan.group(1)) == len(pins) and float(plan.group(2)) > 1.0
    assert "every pin resolves" in proc.stdout
    # the lock and the command line of its first start, read by SGLang's own parser
    draft = json.loads((out / "lock.json").read_text())
    assert draft["runtime"] == "sglang-0.5.23-cuda" and draft["lock"]["execution"]["platform"]["backend"] == "cuda"
    assert f"inference_id {draft['inference_id']}" in proc.stdout
    assert f"CUDA_VISIBLE_DEVICES={SIMULATED_GPU}" in proc.stdout and "  --device cuda \\" in proc.stdout
    assert "--max-total-tokens" not in proc.stdout  # the probe start: SGLang sizes the pool
    assert "read by SGLang 0.5.23 (sglang-0.5.23-cpu-generic): every flag known, every value as the lock means" in proc.stdout
    # the pytest command it would run, and nothing run, installed or started
    would = f"would run: .venv/bin/python -m pytest certify --device cuda --model fixture:tiny --report-dir {out}"
    assert would + " -p no:cacheprovider -rfE -k hardware" in proc.stdout
    assert not (root / "inference" / "runtimes").exists()
    for never in ("runtime-install.json", "pytest.log", "results.json"):
        assert not (out / never).exists(), never
