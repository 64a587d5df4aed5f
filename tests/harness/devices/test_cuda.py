"""CUDA probe through an injectable NVML provider (no GPU exists on the test machine)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pynvml
import pytest

from harness.devices.cuda import PynvmlProvider, driver_major, probe_cuda
from tests.harness.devices.fakes import FakeGpu, FakeNvml


def test_driver_present_with_fake_nvml() -> None:
    """Fake NVML stands in for a driver and an H200: no GPU exists here."""
    nvml = FakeNvml(driver="580.65.06", cuda=13000, gpus=[FakeGpu(), FakeGpu(uuid="GPU-2", capability=(8, 0))])
    cuda = probe_cuda(nvml)
    assert cuda.available
    assert cuda.reason is None
    assert cuda.driver_version == "580.65.06"
    assert cuda.driver_major == 580
    assert cuda.cuda_driver_version == "13.0"
    assert [(g.index, g.uuid, g.compute_capability) for g in cuda.gpus] == [
        (0, "GPU-0b3c5a1e-0000-4000-8000-000000000001", "9.0"),
        (1, "GPU-2", "8.0"),
    ]
    assert cuda.gpus[0].memory_free_bytes == 149_000_000_000
    assert nvml.shutdowns == 1


def test_driver_not_loaded_is_a_reason_not_a_traceback_with_fake_nvml() -> None:
    """Fake NVML whose init fails as with no driver: no GPU exists here."""
    cuda = probe_cuda(FakeNvml(init_error=pynvml.NVMLError_DriverNotLoaded()))
    assert not cuda.available
    assert cuda.reason is not None and cuda.reason.startswith("no NVIDIA driver")
    assert "DriverNotLoaded" in cuda.reason
    assert cuda.gpus == []


def test_query_failure_after_init_still_shuts_down_with_fake_nvml() -> None:
    """Fake NVML that fails after init: no GPU exists here."""
    nvml = FakeNvml(query_error=pynvml.NVMLError_GpuIsLost())
    cuda = probe_cuda(nvml)
    assert not cuda.available
    assert cuda.reason is not None and "NVML query failed" in cuda.reason
    assert nvml.shutdowns == 1


def test_real_nvml_on_this_host_never_raises() -> None:
    cuda = probe_cuda()
    if cuda.available:
        assert cuda.driver_version
    else:
        assert cuda.reason is not None and cuda.reason.startswith("no NVIDIA driver")


def test_driver_major() -> None:
    assert driver_major("580.65.06") == 580
    assert driver_major("575.51.03") == 575
    assert driver_major("garbage") is None


def test_pynvml_provider_maps_calls_with_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """pynvml's functions are replaced by fakes (bytes names, as older bindings return): no GPU exists here."""
    calls: list[str] = []
    memory = SimpleNamespace(total=150_000_000_000, free=140_000_000_000, used=10_000_000_000)
    fakes: dict[str, Callable[..., object]] = {
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlSystemGetDriverVersion": lambda: b"580.82.07",
        "nvmlSystemGetCudaDriverVersion_v2": lambda: 13000,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: ("handle", index),
        "nvmlDeviceGetUUID": lambda handle: b"GPU-aaaa",
        "nvmlDeviceGetName": lambda handle: "NVIDIA H200",
        "nvmlDeviceGetCudaComputeCapability": lambda handle: (9, 0),
        "nvmlDeviceGetMemoryInfo": lambda handle: memory,
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)
    cuda = probe_cuda(PynvmlProvider())
    assert cuda.available
    assert (cuda.driver_version, cuda.driver_major, cuda.cuda_driver_version) == ("580.82.07", 580, "13.0")
    (gpu,) = cuda.gpus
    assert (gpu.uuid, gpu.name, gpu.compute_capability) == ("GPU-aaaa", "NVIDIA H200", "9.0")
    assert (gpu.memory_total_bytes, gpu.memory_free_bytes) == (150_000_000_000, 140_000_000_000)
    assert calls == ["init", "shutdown"]
