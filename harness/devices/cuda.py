"""CUDA facts through NVML (nvidia-ml-py): driver version, and per GPU its UUID, name,
compute capability and memory.

NVML access goes through a small ``NvmlProvider`` so tests can exercise the
"driver present" path with a fake. Any failure to initialise NVML (no library, driver
not loaded, ...) becomes ``available: false`` with a reason naming the missing driver,
never a traceback.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from harness.devices.report import CudaFactsV1, GpuFactsV1

__all__ = ["MIN_DRIVER_MAJOR", "NvmlProvider", "PynvmlProvider", "driver_major", "probe_cuda"]

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


def driver_major(version: str) -> int | None:
    """``580.65.06`` → 580; None when the version does not start with a number."""
    head = version.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _cuda_version_text(raw: int) -> str:
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def probe_cuda(provider: NvmlProvider | None = None) -> CudaFactsV1:
    if provider is None:
        try:
            provider = PynvmlProvider()
        except ImportError as exc:
            return CudaFactsV1(available=False, reason=f"no NVIDIA driver: nvidia-ml-py not importable ({_describe(exc)})")
    try:
        provider.init()
    except Exception as exc:  # any NVML init failure means "no usable driver" to the doctor
        return CudaFactsV1(available=False, reason=f"no NVIDIA driver: NVML init failed ({_describe(exc)})")
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
                )
            )
    except Exception as exc:
        return CudaFactsV1(available=False, reason=f"NVIDIA driver present but NVML query failed ({_describe(exc)})")
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
    )
