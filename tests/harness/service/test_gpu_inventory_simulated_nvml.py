"""The NVML GPU inventory and leasing by UUID, with a *simulated* NVML (no GPU exists on this machine).

:class:`~harness.devices.nvml_sim.SimulatedNvml` implements the same ``NvmlProvider`` interface as the real
``pynvml`` provider; the inventory, the leases and the daemon's capacity are the production code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.daemon.main import config_from, parse_args
from harness.devices import probe_cuda, run_doctor
from harness.devices.gpu_inventory import NvmlGpuInventory
from harness.devices.nvml_sim import SIMULATED_NVML_ENV, SimulatedNvml
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.service.gpu_leases import GpuLeases

GPU_A = "GPU-5a5a5a5a-0000-4000-8000-00000000000a"
GPU_B = "GPU-5a5a5a5a-0000-4000-8000-00000000000b"


def _file(tmp_path: Path, **state: Any) -> Path:
    state.setdefault("gpus", [{"uuid": GPU_A, "name": "NVIDIA H200"}, {"uuid": GPU_B, "name": "NVIDIA H100"}])
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(state))
    return path


def _busy(uuid: str, *pids: int) -> dict[str, Any]:
    return {"uuid": uuid, "processes": [{"pid": p, "used_memory_bytes": 1 << 30} for p in pids]}


def _leases(tmp_path: Path, nvml: Path, root: str = "root-a") -> GpuLeases:
    inventory = NvmlGpuInventory(lambda: SimulatedNvml(nvml))
    return GpuLeases(inventory, tmp_path / root, lease_dir=tmp_path / "gpu-leases")


def test_inventory_reads_every_nvml_fact_with_simulated_nvml(tmp_path: Path) -> None:
    nvml = _file(tmp_path, driver_version="580.82.07", cuda_driver_version=13010, gpus=[_busy(GPU_A, 77), {"uuid": GPU_B}])
    facts = NvmlGpuInventory(lambda: SimulatedNvml(nvml)).facts()
    assert facts.available and facts.simulated
    assert (facts.driver_version, facts.driver_major, facts.cuda_driver_version) == ("580.82.07", 580, "13.1")
    a, b = facts.gpus
    assert (a.index, a.uuid, a.name, a.compute_capability) == (0, GPU_A, "NVIDIA H200", "9.0")
    assert (a.memory_total_bytes, a.memory_free_bytes) == (150_000_000_000, 149_000_000_000)
    assert [(p.pid, p.used_memory_bytes) for p in a.processes or []] == [(77, 1 << 30)]
    assert b.uuid == GPU_B and b.processes == []


def test_a_simulated_nvml_is_never_certifiable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIMULATED_NVML_ENV, str(_file(tmp_path)))
    report = run_doctor("cuda")
    assert report.cuda.simulated and [g.uuid for g in report.cuda.gpus] == [GPU_A, GPU_B]
    assert not report.devices["cuda"].certifiable
    assert report.devices["cuda"].reasons[0].startswith(f"NVML is simulated ({SIMULATED_NVML_ENV})")


def test_a_driver_that_does_not_load_is_no_gpu_with_simulated_nvml(tmp_path: Path) -> None:
    facts = probe_cuda(SimulatedNvml(_file(tmp_path, init_error="NVML_ERROR_DRIVER_NOT_LOADED")))
    assert not facts.available and facts.gpus == []
    assert facts.reason == "no NVIDIA driver: NVML init failed (RuntimeError: NVML_ERROR_DRIVER_NOT_LOADED)"
    assert NvmlGpuInventory(lambda: SimulatedNvml(tmp_path / "nvml.json")).gpu_uuids() == []


def test_lease_by_uuid_and_the_first_free_gpu_with_simulated_nvml(tmp_path: Path) -> None:
    leases = _leases(tmp_path, _file(tmp_path))
    assert leases.acquire("svc-b", GPU_B) == GPU_B
    assert leases.acquire("svc-a") == GPU_A  # the first one without a lease
    with pytest.raises(HitchError) as err:
        _leases(tmp_path, tmp_path / "nvml.json", root="root-b").acquire("svc-c")
    assert err.value.code == "inference_capacity_exceeded" and err.value.message == "every GPU is leased"
    with pytest.raises(HitchError) as unknown:
        leases.acquire("svc-d", "GPU-5a5a5a5a-0000-4000-8000-0000000000ff")
    assert unknown.value.code == "inference_device_unsupported"


def test_a_gpu_with_a_foreign_process_is_reported_and_never_leased_with_simulated_nvml(tmp_path: Path) -> None:
    leases = _leases(tmp_path, _file(tmp_path, gpus=[_busy(GPU_A, 4242), {"uuid": GPU_B}]))
    states = {st.uuid: (st.state, st.foreign_pids) for st in leases.status()}
    assert states == {GPU_A: ("foreign", (4242,)), GPU_B: ("free", ())}
    assert leases.acquire("svc-1") == GPU_B  # skips the busy GPU
    with pytest.raises(HitchError) as err:
        leases.acquire("svc-2", GPU_A)  # asked for by UUID: still refused, the process is left alone
    assert err.value.code == "inference_capacity_exceeded"
    assert err.value.details["foreign"] == [{"uuid": GPU_A, "pids": [4242]}]
    assert not (tmp_path / "gpu-leases" / f"{GPU_A}.json").exists()


def test_a_gpu_whose_processes_cannot_be_listed_counts_as_foreign_with_simulated_nvml(tmp_path: Path) -> None:
    class NoProcessList(SimulatedNvml):
        def device_processes(self, index: int) -> list[tuple[int, int | None]]:
            raise RuntimeError("NVML_ERROR_NO_PERMISSION")

    nvml = _file(tmp_path, gpus=[{"uuid": GPU_A}])
    leases = GpuLeases(NvmlGpuInventory(lambda: NoProcessList(nvml)), tmp_path / "r", lease_dir=tmp_path / "gpu-leases")
    assert [(st.state, st.foreign_pids) for st in leases.status()] == [("foreign", None)]
    with pytest.raises(HitchError) as err:
        leases.acquire("svc")
    assert err.value.details["foreign"] == [{"uuid": GPU_A, "pids": "unknown"}]


def test_the_daemon_counts_nvml_gpus_as_capacity_with_simulated_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIMULATED_NVML_ENV, str(_file(tmp_path)))
    cfg = config_from(parse_args(["--root", str(tmp_path / "root"), "--capacity-cpu", "8"]), HitchRoot(tmp_path / "root"))
    assert isinstance(cfg.gpu_provider, NvmlGpuInventory)
    assert cfg.gpu_provider.gpu_uuids() == [GPU_A, GPU_B]
    assert cfg.capacity is not None and (cfg.capacity.cpu_cores, cfg.capacity.gpu_count) == (8, 2)
    fake = config_from(parse_args(["--root", str(tmp_path / "r2"), "--fake-gpu", GPU_A]), HitchRoot(tmp_path / "r2"))
    assert fake.gpu_provider is not None and fake.gpu_provider.gpu_uuids() == [GPU_A]  # --fake-gpu, for tests


def test_a_gpu_too_small_for_the_lock_is_never_leased_with_simulated_nvml(tmp_path: Path) -> None:
    small = {"uuid": GPU_A, "memory_total_bytes": 16 << 30, "memory_free_bytes": 16 << 30}
    large = {"uuid": GPU_B, "memory_total_bytes": 141 << 30, "memory_free_bytes": 141 << 30}
    leases = _leases(tmp_path, _file(tmp_path, gpus=[small, large]))
    assert leases.acquire("svc-1", memory_bytes=80 << 30) == GPU_B  # A is free but too small
    with pytest.raises(HitchError) as err:
        leases.acquire("svc-2", memory_bytes=80 << 30)  # only A is left
    assert err.value.code == "inference_capacity_exceeded"
    assert err.value.details["free_gpus"] == {GPU_A: 16 << 30} and err.value.details["needed_bytes"] == 80 << 30
    assert not (tmp_path / "gpu-leases" / f"{GPU_A}.json").exists()
    assert leases.acquire("svc-3", memory_bytes=8 << 30) == GPU_A  # a lock that fits takes it


def test_the_lock_needs_its_memory_within_the_static_fraction() -> None:
    import math

    from harness.service.manager import gpu_memory_needed
    from tests.harness.service.manager_fakes import make_lock

    lock = make_lock(device="cuda")
    fraction = lock.execution.platform.mem_fraction_static  # type: ignore[union-attr]
    assert fraction == 0.8 and lock.resources.gpu_memory_bytes > 0
    assert gpu_memory_needed(lock) == math.ceil(lock.resources.gpu_memory_bytes / fraction)
    assert gpu_memory_needed(make_lock()) == 0  # a CPU lock needs no GPU memory


def test_processes_by_gpu_names_the_engines_pids_per_uuid_with_simulated_nvml(tmp_path: Path) -> None:
    from harness.devices.gpu_inventory import processes_by_gpu

    nvml = _file(tmp_path, gpus=[_busy(GPU_A, 10, 11, 99), _busy(GPU_B, 98)])
    facts = NvmlGpuInventory(lambda: SimulatedNvml(nvml)).facts()
    assert processes_by_gpu(facts, {10, 11, 12}) == {GPU_A: [(10, 1 << 30), (11, 1 << 30)], GPU_B: []}
