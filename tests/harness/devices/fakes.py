"""Fakes for the doctor's probes: a /proc + /sys tree, an NVML provider, a Docker API.

No GPU and no Docker engine exist on the test machine; these stand in for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AMX_XEON_FLAGS = "fpu sse sse2 avx avx2 avx512f avx512bw avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8 avx_vnni"
NO_AMX_FLAGS = "fpu sse sse2 avx avx2 fma"


def make_sys_tree(
    root: Path,
    *,
    flags: str = NO_AMX_FLAGS,
    vendor: str = "GenuineIntel",
    model: str = "Intel(R) Xeon(R) Platinum 8480+",
    processors: int = 4,
    nodes: Mapping[int, str] | None = None,
    mem_total_kb: int = 16 * 1024 * 1024,
    mem_available_kb: int = 8 * 1024 * 1024,
    threads_per_core: int | None = None,
) -> Path:
    """A fake machine under ``root``: proc/cpuinfo, proc/meminfo, sys/devices/system/node, dev/shm.

    ``threads_per_core`` adds ``physical id``/``core id`` lines (one package); without it cpuinfo has no topology.
    """
    topology = [
        f"physical id\t: 0\ncore id\t\t: {i // threads_per_core}\n" if threads_per_core else "" for i in range(processors)
    ]
    blocks = [
        f"processor\t: {i}\nvendor_id\t: {vendor}\nmodel name\t: {model}\n{topology[i]}flags\t\t: {flags}\n"
        for i in range(processors)
    ]
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text("\n".join(blocks))
    (root / "proc" / "meminfo").write_text(
        f"MemTotal:       {mem_total_kb} kB\nMemFree:        1024 kB\nMemAvailable:   {mem_available_kb} kB\n"
    )
    node_base = root / "sys" / "devices" / "system" / "node"
    node_base.mkdir(parents=True)
    (node_base / "online").write_text("0\n")
    for index, cpulist in (nodes if nodes is not None else {0: f"0-{processors - 1}"}).items():
        (node_base / f"node{index}").mkdir()
        (node_base / f"node{index}" / "cpulist").write_text(cpulist + "\n")
    (root / "dev" / "shm").mkdir(parents=True)
    return root


@dataclass
class FakeGpu:
    uuid: str = "GPU-0b3c5a1e-0000-4000-8000-000000000001"
    name: str = "NVIDIA H200"
    capability: tuple[int, int] = (9, 0)
    total: int = 150_000_000_000
    free: int = 149_000_000_000
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeNvml:
    """Stands in for NVML; no GPU exists on the test machine."""

    driver: str = "580.65.06"
    cuda: int = 13000
    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu()])
    init_error: Exception | None = None
    query_error: Exception | None = None
    shutdowns: int = 0

    def init(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def shutdown(self) -> None:
        self.shutdowns += 1

    def driver_version(self) -> str:
        return self.driver

    def cuda_driver_version(self) -> int:
        return self.cuda

    def device_count(self) -> int:
        if self.query_error is not None:
            raise self.query_error
        return len(self.gpus)

    def device_uuid(self, index: int) -> str:
        return self.gpus[index].uuid

    def device_name(self, index: int) -> str:
        return self.gpus[index].name

    def device_compute_capability(self, index: int) -> tuple[int, int]:
        return self.gpus[index].capability

    def device_memory(self, index: int) -> tuple[int, int]:
        return self.gpus[index].total, self.gpus[index].free

    def device_processes(self, index: int) -> list[tuple[int, int | None]]:
        return list(self.gpus[index].processes)


@dataclass
class FakeDocker:
    """Stands in for docker.DockerClient; no Docker engine runs on the test machine."""

    runtimes: tuple[str, ...] = ("io.containerd.runc.v2", "nvidia", "runc")
    os_type: str = "linux"
    architecture: str = "x86_64"
    closed: bool = False

    def version(self) -> Mapping[str, Any]:
        return {"Version": "28.3.0", "ApiVersion": "1.51", "Os": "linux", "Arch": "amd64"}

    def info(self) -> Mapping[str, Any]:
        return {
            "Runtimes": {name: {"path": name} for name in self.runtimes},
            "DefaultRuntime": "runc",
            "CgroupDriver": "systemd",
            "CgroupVersion": "2",
            "OSType": self.os_type,
            "Architecture": self.architecture,
        }

    def close(self) -> None:
        self.closed = True
