"""DoctorReportV1: the payload of ``hitch local doctor`` (facts + per-device verdicts).

Everything here is a plain record so the JSON Schema can be exported and other
commands (lock, certification) can read the same facts the doctor printed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.contracts.base import Record

__all__ = [
    "CpuFactsV1",
    "CudaFactsV1",
    "DeviceName",
    "DeviceVerdictV1",
    "DoctorReportV1",
    "DockerFactsV1",
    "EffectiveSettingV1",
    "GpuFactsV1",
    "GpuProcessV1",
    "HostFactsV1",
    "NumaNodeV1",
    "RequestedDevice",
]

DeviceName = Literal["cpu", "cuda"]
RequestedDevice = Literal["cpu", "cuda", "auto"]


class HostFactsV1(Record):
    hostname: str
    os: str = Field(description="platform.system(), lower case, e.g. linux")
    kernel: str
    arch: str = Field(description="platform.machine(), e.g. x86_64")
    python: str
    hitch_root: str = Field(description="the HITCH_ROOT the doctor looked at (never created)")
    hitch_root_exists: bool


class NumaNodeV1(Record):
    node: int = Field(ge=0)
    cpulist: str = Field(description="as in /sys/devices/system/node/nodeN/cpulist")
    cpus: int = Field(ge=0, description="logical CPUs on the node (0 for memory-only nodes)")


class CpuFactsV1(Record):
    vendor: str | None = Field(description="vendor_id from /proc/cpuinfo, e.g. GenuineIntel")
    model_name: str | None
    isa_flags: list[str] = Field(description="sorted ISA flags that matter: amx*, avx512*, avx_vnni, avx2")
    amx: bool = Field(description="amx_tile and amx_bf16 both present")
    avx512: bool = Field(description="avx512f present")
    avx2: bool
    logical_cores: int = Field(ge=1)
    physical_cores: int | None = Field(
        default=None, ge=1, description="distinct physical cores (physical id x core id); null when cpuinfo lacks them"
    )
    usable_cores: int = Field(ge=1, description="CPUs this process may run on (affinity)")
    numa_nodes: list[NumaNodeV1]
    cores_per_node: int = Field(ge=1, description="logical CPUs on the smallest NUMA node that has CPUs")
    memory_total_bytes: int = Field(ge=0)
    memory_available_bytes: int = Field(ge=0)
    shm_total_bytes: int | None = Field(description="/dev/shm size; null when there is no /dev/shm")
    shm_free_bytes: int | None


class GpuProcessV1(Record):
    pid: int = Field(ge=0, description="as NVML reports it (a PID in another PID namespace may mean nothing here)")
    used_memory_bytes: int | None = Field(default=None, ge=0, description="null when the driver does not say")


class GpuFactsV1(Record):
    index: int = Field(ge=0)
    uuid: str
    name: str
    compute_capability: str = Field(description="major.minor, e.g. 9.0")
    memory_total_bytes: int = Field(ge=0)
    memory_free_bytes: int = Field(ge=0)
    processes: list[GpuProcessV1] | None = Field(
        default_factory=list, description="compute and graphics processes on the GPU; null when NVML could not list them"
    )


class CudaFactsV1(Record):
    available: bool = Field(description="NVML initialised (a driver is loaded)")
    reason: str | None = Field(default=None, description="why not available")
    driver_version: str | None = None
    driver_major: int | None = None
    cuda_driver_version: str | None = Field(default=None, description="highest CUDA the driver supports, e.g. 13.0")
    gpus: list[GpuFactsV1] = Field(default_factory=list)
    simulated: bool = Field(default=False, description="facts from a simulated NVML (tests only): never certifiable")


class DockerFactsV1(Record):
    reachable: bool
    reason: str | None = Field(default=None, description="why not reachable")
    host: str = Field(description="DOCKER_HOST, or the SDK default socket")
    server_version: str | None = None
    api_version: str | None = None
    os_type: str | None = None
    architecture: str | None = None
    runtimes: list[str] = Field(default_factory=list)
    default_runtime: str | None = None
    nvidia_runtime: bool = False
    cgroup_driver: str | None = None
    cgroup_version: str | None = None
    limits: list[str] = Field(
        default_factory=list, description="stated limits of container isolation on this engine (what hitch does not close)"
    )


class DeviceVerdictV1(Record):
    certifiable: bool
    reasons: list[str] = Field(description="why not certifiable (empty when certifiable)")
    can_do: list[str] = Field(description="what this machine can still do on this device")


class EffectiveSettingV1(Record):
    """One environment variable hitch honours, as it is in force (:func:`harness.settings.effective_settings`)."""

    name: str
    value: str | int | bool | None = Field(description="in force: the environment's value, else the default; secrets ***")
    source: Literal["environment", "default"]
    secret: bool
    help: str


class DoctorReportV1(Record):
    schema_version: Literal["1"] = "1"
    kind: Literal["doctor"] = "doctor"
    requested_device: RequestedDevice
    host: HostFactsV1
    cpu: CpuFactsV1
    cuda: CudaFactsV1
    docker: DockerFactsV1
    devices: dict[DeviceName, DeviceVerdictV1] = Field(description="verdicts for the requested device(s) only")
    selected: DeviceName | None = Field(description="certifiable device chosen (auto: cuda, then cpu); null if none")
    selected_reason: str
    settings: list[EffectiveSettingV1] | None = Field(
        default=None, description="`hitch local doctor`: every setting in force (secrets masked); absent elsewhere"
    )
