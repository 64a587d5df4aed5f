"""The daemon's GPU inventory, read from NVML (:mod:`harness.devices.cuda`) on every call.

It is the production :class:`~harness.service.gpu_leases.GpuDeviceProvider`: GPU capacity and leases are built
from the UUIDs NVML lists, and the processes NVML sees on a GPU tell leasing whether something Hitch did not
start uses it (spec §8.2). Nothing is cached: a GPU that a foreign process takes after the daemon started is
seen at the next lease.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.devices.cuda import NvmlProvider, probe_cuda
from harness.devices.report import CudaFactsV1

__all__ = ["GpuUsage", "NvmlGpuInventory", "processes_by_gpu"]


@dataclass(frozen=True)
class GpuUsage:
    pids: tuple[int, ...] | None  # the processes on the GPU; None when NVML could not list them
    memory_total_bytes: int | None


class NvmlGpuInventory:
    def __init__(self, nvml: Callable[[], NvmlProvider] | None = None) -> None:
        self._nvml = nvml

    def facts(self) -> CudaFactsV1:
        return probe_cuda(self._nvml() if self._nvml is not None else None)

    def gpu_uuids(self) -> list[str]:
        facts = self.facts()
        return [gpu.uuid for gpu in facts.gpus] if facts.available else []

    def gpu_usage(self) -> dict[str, GpuUsage]:
        """Every GPU's processes and total memory, from one NVML read (empty when NVML has no GPU)."""
        facts = self.facts()
        if not facts.available:
            return {}
        return {
            gpu.uuid: GpuUsage(tuple(p.pid for p in gpu.processes) if gpu.processes is not None else None, gpu.memory_total_bytes)
            for gpu in facts.gpus
        }


def processes_by_gpu(facts: CudaFactsV1, pids: set[int]) -> dict[str, list[tuple[int, int | None]]]:
    """For every GPU, which of ``pids`` (an engine's process tree) NVML lists on it, with their memory."""
    return {gpu.uuid: [(p.pid, p.used_memory_bytes) for p in gpu.processes or [] if p.pid in pids] for gpu in facts.gpus}
