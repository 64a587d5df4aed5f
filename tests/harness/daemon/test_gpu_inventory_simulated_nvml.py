"""The daemon's GPU inventory from NVML, end to end with a *simulated* NVML (no GPU exists on this machine).

``HITCH_SIMULATED_NVML`` points the daemon (and the doctor) at a JSON file describing two GPUs; the daemon
builds its GPU capacity and leases from it, ``hitch local prepare --device cuda --engine fake`` leases one
UUID, and the fake engine — started by the real launcher — is given exactly that UUID to see. A GPU used by a
process Hitch did not start is reported and never leased.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.app.daemon_client import start_daemon
from harness.devices.nvml_sim import SIMULATED_NVML_ENV
from harness.errors import ERROR_TABLE
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration

GPU_A = "GPU-5a5a5a5a-0000-4000-8000-00000000000a"
GPU_B = "GPU-5a5a5a5a-0000-4000-8000-00000000000b"


def _simulate(path: Path, *, foreign_on_a: list[int] | None = None, foreign_on_b: list[int] | None = None) -> None:
    gpus: list[dict[str, Any]] = [
        {"uuid": GPU_A, "processes": [{"pid": p, "used_memory_bytes": 1 << 30} for p in foreign_on_a or []]},
        {"uuid": GPU_B, "processes": [{"pid": p, "used_memory_bytes": 1 << 30} for p in foreign_on_b or []]},
    ]
    path.write_text(json.dumps({"gpus": gpus}))


@pytest.fixture
def simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "nvml.json"
    _simulate(path)
    monkeypatch.setenv(SIMULATED_NVML_ENV, str(path))  # the CLI and the daemon it starts inherit it
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))  # a private GPU lease directory
    (tmp_path / "xdg").mkdir()
    return path


def _prepare_cuda(inputs: ServiceInputs) -> Any:
    # a CUDA lock asks for 4 CPU cores: more than this 2-core machine has, so the ledger is told a larger one
    start_daemon(inputs.root, [*FAST, "--capacity-cpu", "64", "--capacity-memory", str(1 << 40)])
    return hitch(inputs.root, "local", "prepare", "local/tiny", "--device", "cuda", "--engine", "fake", "--json")


def _engine_log(inputs: ServiceInputs, service_id: str) -> str:
    folder = inputs.root.services / service_id
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*.log")))


def test_prepare_on_cuda_leases_one_uuid_and_the_fake_engine_sees_only_it_with_simulated_nvml(
    inputs: ServiceInputs, simulated: Path
) -> None:
    _simulate(simulated, foreign_on_a=[os.getpid()])  # GPU A busy with a process Hitch did not start
    out = as_json(_prepare_cuda(inputs))
    log = _engine_log(inputs, out["service_id"])
    seen = [line.split("CUDA_VISIBLE_DEVICES=", 1)[1].strip() for line in log.splitlines() if "CUDA_VISIBLE_DEVICES=" in line]
    assert seen == [GPU_B], log  # the one free GPU, by UUID, and nothing else
    assert out["stopped"] is True

    status = as_json(hitch(inputs.root, "local", "status", "--json"))
    gpus = {g["uuid"]: g for g in status["gpus"]}
    assert gpus[GPU_A]["state"] == "foreign" and gpus[GPU_A]["foreign_pids"] == [os.getpid()]
    assert gpus[GPU_B]["state"] == "free"  # released when prepare stopped the service
    human = hitch(inputs.root, "local", "status")
    assert f"GPU {GPU_A} used by processes Hitch did not start (pids [{os.getpid()}]): not leased" in human.stdout


def test_prepare_on_cuda_is_refused_when_every_gpu_has_a_foreign_process_with_simulated_nvml(
    inputs: ServiceInputs, simulated: Path
) -> None:
    _simulate(simulated, foreign_on_a=[4242], foreign_on_b=[4343])
    err = as_json(_prepare_cuda(inputs), code=ERROR_TABLE["inference_capacity_exceeded"].exit_code)["error"]
    assert err["code"] == "inference_capacity_exceeded"
    assert "processes Hitch did not start" in err["message"]
    assert err["details"]["foreign"] == [{"uuid": GPU_A, "pids": [4242]}, {"uuid": GPU_B, "pids": [4343]}]


def test_prepare_on_cuda_is_refused_when_the_lock_does_not_fit_any_gpu_with_simulated_nvml(
    inputs: ServiceInputs, simulated: Path
) -> None:
    tiny_gpus = [{"uuid": uuid, "memory_total_bytes": 1 << 20, "memory_free_bytes": 1 << 20} for uuid in (GPU_A, GPU_B)]
    simulated.write_text(json.dumps({"gpus": tiny_gpus}))  # 1 MiB GPUs: the tiny model's lock needs more
    err = as_json(_prepare_cuda(inputs), code=ERROR_TABLE["inference_capacity_exceeded"].exit_code)["error"]
    assert err["code"] == "inference_capacity_exceeded"
    assert err["message"] == "the lock needs more GPU memory than the free GPU(s) have"
    assert sorted(err["details"]["free_gpus"]) == [GPU_A, GPU_B]
    assert not list(inputs.root.services.rglob("*.log")) or "CUDA_VISIBLE_DEVICES=" not in "".join(
        p.read_text(errors="replace") for p in inputs.root.services.rglob("*.log")
    )  # no engine was started: nothing ran on a GPU, and nothing on a CPU instead
