"""The daemon's GPU inventory, read from NVML (:mod:`harness.devices.cuda`) on every call.

It is the production :class:`~harness.service.gpu_leases.GpuDeviceProvider`: GPU capacity and leases are built
from the UUIDs NVML lists, and the processes NVML sees on a GPU tell leasing whether something Hitch did not
start uses it (spec §8.2). Nothing is cached: a GPU that a foreign process takes after the daemon started is
seen at the next lease.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.devices.cuda import NvmlProvider, probe_cuda
from harness.devices.report import CudaFactsV1

__all__ = ["NvmlGpuInventory", "processes_by_gpu"]


class NvmlGpuInventory:
    def __init__(self, nvml: Callable[[], NvmlProvider] | None = None) -> None:
        self._nvml = nvml

    def facts(self) -> CudaFactsV1:
        return probe_cuda(self._nvml() if self._nvml is not None else None)

    def gpu_uuids(self) -> list[str]:
        facts = self.facts()
        return [gpu.uuid for gpu in facts.gpus] if facts.available else []

    def gpu_processes(self, uuid: str) -> list[int] | None:
        """PIDs using ``uuid``; None when NVML cannot say (or no longer lists the GPU)."""
        gpu = next((g for g in self.facts().gpus if g.uuid == uuid), None)
        if gpu is None or gpu.processes is None:
            return None
        return [p.pid for p in gpu.processes]

    def gpu_memory_total(self, uuid: str) -> int | None:
        gpu = next((g for g in self.facts().gpus if g.uuid == uuid), None)
        return gpu.memory_total_bytes if gpu is not None else None


def processes_by_gpu(facts: CudaFactsV1, pids: set[int]) -> dict[str, list[tuple[int, int | None]]]:
    """For every GPU, which of ``pids`` (an engine's process tree) NVML lists on it, with their memory."""
    return {gpu.uuid: [(p.pid, p.used_memory_bytes) for p in gpu.processes or [] if p.pid in pids] for gpu in facts.gpus}
