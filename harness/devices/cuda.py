"""CUDA facts through NVML (nvidia-ml-py): driver and CUDA driver version, and per GPU its UUID, name,
compute capability, memory and the processes using it.

NVML access goes through one small interface, ``NvmlProvider``: :class:`PynvmlProvider` is the real
library, :class:`~harness.devices.nvml_sim.SimulatedNvml` a simulation for tests on machines without a GPU
(selected by ``HITCH_SIMULATED_NVML``, and then marked ``simulated`` so nothing it backs is certifiable).
Any failure to initialise NVML (no library, driver not loaded, ...) becomes ``available: false`` with a
reason naming the missing driver, never a traceback.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from harness.devices.nvml_sim import simulated_from_env
from harness.devices.report import CudaFactsV1, GpuFactsV1, GpuProcessV1

__all__ = ["MIN_DRIVER_MAJOR", "NvmlProvider", "PynvmlProvider", "default_nvml", "driver_major", "probe_cuda"]

MIN_DRIVER_MAJOR = 580
"""CUDA 13 images need a driver of this major version or newer (conservative)."""


class NvmlProvider(Protocol):
    """The NVML calls the doctor needs; each may raise any exception."""

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def driver_version(self) -> str: ...

    def cuda_driver_version(self) -> int:
        """As NVML reports it, e.g. 13000 for CUDA 13.0."""
        ...

    def device_count(self) -> int: ...

    def device_uuid(self, index: int) -> str: ...

    def device_name(self, index: int) -> str: ...

    def device_compute_capability(self, index: int) -> tuple[int, int]: ...

    def device_memory(self, index: int) -> tuple[int, int]:
        """(total, free) bytes."""
        ...

    def device_processes(self, index: int) -> list[tuple[int, int | None]]:
        """(pid, used bytes or None) of every compute and graphics process on the GPU."""
        ...


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class PynvmlProvider:
    """The real provider: nvidia-ml-py's ``pynvml`` module, imported lazily."""

    def __init__(self) -> None:
        import pynvml

        self._nvml = pynvml

    def init(self) -> None:
        self._nvml.nvmlInit()

    def shutdown(self) -> None:
        self._nvml.nvmlShutdown()

    def driver_version(self) -> str:
        return _text(self._nvml.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        return int(self._nvml.nvmlSystemGetCudaDriverVersion_v2())

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def _handle(self, index: int) -> object:
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def device_uuid(self, index: int) -> str:
        return _text(self._nvml.nvmlDeviceGetUUID(self._handle(index)))

    def device_name(self, index: int) -> str:
        return _text(self._nvml.nvmlDeviceGetName(self._handle(index)))

    def device_compute_capability(self, index: int) -> tuple[int, int]:
        major, minor = self._nvml.nvmlDeviceGetCudaComputeCapability(self._handle(index))
        return int(major), int(minor)

    def device_memory(self, index: int) -> tuple[int, int]:
        info = self._nvml.nvmlDeviceGetMemoryInfo(self._handle(index))
        return int(info.total), int(info.free)

    def device_processes(self, index: int) -> list[tuple[int, int | None]]:
        handle = self._handle(index)
        found: dict[int, int | None] = {}
        for query in (self._nvml.nvmlDeviceGetComputeRunningProcesses, self._nvml.nvmlDeviceGetGraphicsRunningProcesses):
            for proc in query(handle):
                used = getattr(proc, "usedGpuMemory", None)
                # NVML reports "not available" as None (WDDM) or as the all-ones value
                found[int(proc.pid)] = int(used) if isinstance(used, int) and used < (1 << 63) else found.get(int(proc.pid))
        return sorted(found.items())


def driver_major(version: str) -> int | None:
    """``580.65.06`` → 580; None when the version does not start with a number."""
    head = version.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _cuda_version_text(raw: int) -> str:
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def default_nvml() -> NvmlProvider:
    """This machine's NVML, or the simulation ``HITCH_SIMULATED_NVML`` names (tests; raises ImportError w/o pynvml)."""

    simulated = simulated_from_env()
    return simulated if simulated is not None else PynvmlProvider()


def _processes(provider: NvmlProvider, index: int) -> list[GpuProcessV1] | None:
    try:
        return [GpuProcessV1(pid=pid, used_memory_bytes=used) for pid, used in provider.device_processes(index)]
    except Exception:  # unknown is not "none": a caller that needs the GPU to itself treats it as busy
        return None


def probe_cuda(provider: NvmlProvider | None = None) -> CudaFactsV1:
    if provider is None:
        try:
            provider = default_nvml()
        except ImportError as exc:
            return CudaFactsV1(available=False, reason=f"no NVIDIA driver: nvidia-ml-py not importable ({_describe(exc)})")
    simulated = bool(getattr(provider, "simulated", False))
    try:
        provider.init()
    except Exception as exc:  # any NVML init failure means "no usable driver" to the doctor
        return CudaFactsV1(available=False, reason=f"no NVIDIA driver: NVML init failed ({_describe(exc)})", simulated=simulated)
    try:
        version = provider.driver_version()
        try:
            cuda_version: str | None = _cuda_version_text(provider.cuda_driver_version())
        except Exception:  # older drivers lack the call; the driver version alone decides
            cuda_version = None
        gpus: list[GpuFactsV1] = []
        for index in range(provider.device_count()):
            major, minor = provider.device_compute_capability(index)
            total, free = provider.device_memory(index)
            gpus.append(
                GpuFactsV1(
                    index=index,
                    uuid=provider.device_uuid(index),
                    name=provider.device_name(index),
                    compute_capability=f"{major}.{minor}",
                    memory_total_bytes=total,
                    memory_free_bytes=free,
                    processes=_processes(provider, index),
                )
            )
    except Exception as exc:
        return CudaFactsV1(
            available=False, reason=f"NVIDIA driver present but NVML query failed ({_describe(exc)})", simulated=simulated
        )
    finally:
        # shutdown failing changes none of the facts already read
        with contextlib.suppress(Exception):
            provider.shutdown()
    return CudaFactsV1(
        available=True,
        driver_version=version,
        driver_major=driver_major(version),
        cuda_driver_version=cuda_version,
        gpus=gpus,
        simulated=simulated,
    )
