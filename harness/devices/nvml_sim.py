"""A simulated NVML for machines without a GPU (tests only): the ``NvmlProvider`` interface over a JSON file.

``HITCH_SIMULATED_NVML=<file>`` makes :func:`~harness.devices.cuda.default_nvml` (the doctor, the daemon's GPU
inventory) read GPUs from that file instead of the driver, so GPU inventory, leasing and launch wiring run
end to end in processes a test starts. The file is re-read on every ``init()``: a test can add a foreign
process while a daemon runs. Facts from it carry ``simulated: true`` and the doctor never calls a simulated
machine certifiable, so no certificate can rest on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field

from harness.contracts.base import Record, parse_record
from harness.devices.report import GpuProcessV1
from harness.errors import HitchError
from harness.settings import env_name, settings

__all__ = ["SIMULATED_NVML_ENV", "SimulatedGpuV1", "SimulatedNvml", "SimulatedNvmlV1", "simulated_from_env"]

SIMULATED_NVML_ENV = env_name("simulated_nvml")


class SimulatedGpuV1(Record):
    uuid: str
    name: str = "NVIDIA H200"
    compute_capability: tuple[int, int] = (9, 0)
    memory_total_bytes: int = Field(default=150_000_000_000, ge=0)
    memory_free_bytes: int = Field(default=149_000_000_000, ge=0)
    processes: list[GpuProcessV1] = Field(default_factory=list)


class SimulatedNvmlV1(Record):
    schema_version: Literal["1"] = "1"
    driver_version: str = "580.65.06"
    cuda_driver_version: int = Field(default=13000, description="as NVML reports it: 13000 = CUDA 13.0")
    init_error: str | None = Field(default=None, description="simulate a driver that does not load")
    gpus: list[SimulatedGpuV1] = Field(default_factory=list)


class SimulatedNvml:
    """``NvmlProvider`` backed by a :class:`SimulatedNvmlV1` file."""

    simulated = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self._state = SimulatedNvmlV1()

    def init(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"simulated NVML file {self.path} unreadable: {exc}") from exc
        try:
            self._state = parse_record(SimulatedNvmlV1, data, "usage_error")
        except HitchError as exc:
            raise RuntimeError(f"simulated NVML file {self.path}: {exc.message}") from exc
        if self._state.init_error is not None:
            raise RuntimeError(self._state.init_error)

    def shutdown(self) -> None:
        return None

    def driver_version(self) -> str:
        return self._state.driver_version

    def cuda_driver_version(self) -> int:
        return self._state.cuda_driver_version

    def device_count(self) -> int:
        return len(self._state.gpus)

    def device_uuid(self, index: int) -> str:
        return self._state.gpus[index].uuid

    def device_name(self, index: int) -> str:
        return self._state.gpus[index].name

    def device_compute_capability(self, index: int) -> tuple[int, int]:
        return self._state.gpus[index].compute_capability

    def device_memory(self, index: int) -> tuple[int, int]:
        gpu = self._state.gpus[index]
        return gpu.memory_total_bytes, gpu.memory_free_bytes

    def device_processes(self, index: int) -> list[tuple[int, int | None]]:
        return [(p.pid, p.used_memory_bytes) for p in self._state.gpus[index].processes]


def simulated_from_env() -> SimulatedNvml | None:
    path = settings().simulated_nvml
    return SimulatedNvml(path) if path is not None else None
