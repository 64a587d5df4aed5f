"""The CUDA runtime's launch, built without a GPU: what ``sglang-0.5.23-cuda`` is started with on a GPU machine.

No GPU exists here, so nothing is executed: the argv, the environment and the runtime's catalog record are
inspected. A CUDA engine sees exactly the leased GPU by UUID, runs the lock's memory fraction and CUDA graph
settings, and has nothing that would select SGLang's CPU engine (spec §8.1: no CPU fallback).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contracts.lock import InferenceLockV1
from harness.engine import EngineProgram, engine_flags, prepare_launch
from harness.errors import HitchError
from harness.lock import build_lock
from harness.runtimes import InstalledRuntime, get_runtime, require_certifiable_pin
from harness.store import read_manifest
from tests.harness.engine.inputs import ServiceInputs

CUDA_RUNTIME = "sglang-0.5.23-cuda"
GPU = "GPU-8f2c3c1e-1111-2222-3333-444455556666"


def _cuda_lock(inputs: ServiceInputs, *, graphs: bool = True) -> InferenceLockV1:
    manifest = read_manifest(inputs.root, inputs.lock.model_id)
    lock = build_lock(manifest, get_runtime(CUDA_RUNTIME), device="cuda", profile="baseline", cpu_cores_per_node=2)
    if graphs:
        return lock
    data = lock.to_json_dict()
    data["execution"]["platform"]["cuda_graph"] = "disabled"
    data.pop("inference_id")
    from harness.contracts.lock import compute_inference_id

    data["inference_id"] = compute_inference_id(data)
    return InferenceLockV1.model_validate(data)


def _pairs(flags: list[str]) -> dict[str, str | None]:
    return {
        tok: (flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None)
        for i, tok in enumerate(flags)
        if tok.startswith("--")
    }


def test_the_cuda_runtime_is_pinned_and_certifiable() -> None:
    runtime = require_certifiable_pin(get_runtime(CUDA_RUNTIME))
    assert runtime.backend == "cuda" and runtime.package.kind == "python-env"
    assert runtime.certifiable and runtime.pinned
    assert (runtime.engine_version, runtime.torch_version, runtime.cuda_version) == ("0.5.23", "2.14.1", "13.0")
    assert "SGLANG_USE_CPU_ENGINE" not in runtime.launch_env


def test_cuda_launch_sees_only_the_leased_uuid_with_the_locks_gpu_settings(inputs: ServiceInputs, tmp_path: Path) -> None:
    lock = _cuda_lock(inputs)
    runtime = InstalledRuntime(get_runtime(CUDA_RUNTIME), tmp_path, tmp_path / "venv/bin/python", {})
    launch = prepare_launch(
        inputs.root, lock, inputs.model_dir, EngineProgram.from_runtime(runtime), service_id="s", epoch=1, port=4000, gpu_uuid=GPU
    )
    assert launch.spec.argv[:3] == [str(tmp_path / "venv/bin/python"), "-m", "sglang.launch_server"]
    flags = _pairs(launch.spec.argv[3:])
    platform = lock.execution.platform
    assert flags["--device"] == "cuda"
    assert flags["--mem-fraction-static"] == str(platform.mem_fraction_static) == "0.8"  # type: ignore[union-attr]
    assert flags["--attention-backend"] == "flashinfer" and flags["--sampling-backend"] == "flashinfer"
    assert flags["--cuda-graph-max-bs-decode"] == str(lock.execution.max_running_requests)
    assert "--cuda-graph-backend-decode" not in flags  # graphs on: SGLang captures them
    assert launch.spec.env["CUDA_VISIBLE_DEVICES"] == GPU
    assert launch.spec.gpu_uuid == GPU and launch.spec.device == "cuda"
    for cpu_only in ("SGLANG_USE_CPU_ENGINE", "OMP_NUM_THREADS"):
        assert cpu_only not in launch.spec.env


def test_cuda_graphs_disabled_by_the_lock_are_disabled_on_the_command_line(inputs: ServiceInputs) -> None:
    flags = _pairs(engine_flags(_cuda_lock(inputs, graphs=False), inputs.model_dir, "127.0.0.1", 1, "/c.yaml"))
    assert flags["--cuda-graph-backend-decode"] == "disabled" and flags["--cuda-graph-backend-prefill"] == "disabled"
    assert "--cuda-graph-max-bs-decode" not in flags


def test_a_cuda_launch_without_a_leased_gpu_is_refused(inputs: ServiceInputs) -> None:
    with pytest.raises(HitchError) as err:
        prepare_launch(inputs.root, _cuda_lock(inputs), inputs.model_dir, EngineProgram.fake(), service_id="s", epoch=1, port=1)
    assert err.value.code == "inference_device_unsupported"
