"""The read-only doctor: gathers CPU, CUDA and Docker facts and decides, per device,
whether this machine is certifiable and, if not, why and what it can still do.

Nothing here writes: not under HITCH_ROOT (which is not even created), not anywhere.
Every probe is injectable (``sys_root``, ``nvml``, ``docker_factory``, ``pinned_images``)
so each verdict can be tested without the hardware.
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.contracts.evidence import HardwareFingerprintV1
from harness.devices.cpu import AMX_FLAGS, probe_cpu
from harness.devices.cuda import MIN_DRIVER_MAJOR, NvmlProvider, probe_cuda
from harness.devices.docker_probe import DockerApi, probe_docker
from harness.devices.nvml_sim import SIMULATED_NVML_ENV
from harness.devices.report import (
    CpuFactsV1,
    CudaFactsV1,
    DeviceName,
    DeviceVerdictV1,
    DockerFactsV1,
    DoctorReportV1,
    HostFactsV1,
    RequestedDevice,
)
from harness.errors import HitchError
from harness.paths import resolve_root
from harness.runtimes.catalog import load_catalog

__all__ = [
    "CUDA_MIN_COMPUTE_CAPABILITY",
    "CatalogView",
    "cpu_verdict",
    "cuda_verdict",
    "fingerprint_record",
    "gpu_reasons",
    "read_catalog",
    "run_doctor",
    "select_device",
]

CUDA_MIN_COMPUTE_CAPABILITY = (7, 5)
"""CUDA 13 dropped GPUs older than Turing (SM 7.5)."""

FAKE_ENGINE = "fake engine (contract)"
_X86_64 = frozenset({"x86_64", "amd64"})


@dataclass(frozen=True)
class CatalogView:
    """What the doctor needs from the runtime catalog: is a certifiable pinned image (or, for CUDA, a
    certifiable hash-pinned python-env runtime, run by the process launcher without Docker) there?"""

    pinned: Mapping[str, bool] = field(default_factory=dict)
    problem: str | None = None
    python_env: Mapping[str, bool] = field(default_factory=dict)

    def has_pinned(self, device: DeviceName) -> bool:
        return bool(self.pinned.get(device, False))

    def has_python_env(self, device: DeviceName) -> bool:
        return bool(self.python_env.get(device, False))


def read_catalog(path: Path | None = None) -> CatalogView:
    """Which backends have a certifiable, digest-pinned OCI image in the runtime catalog."""
    try:
        runtimes = load_catalog(path)
    except HitchError as exc:
        return CatalogView(problem=f"runtime catalog unreadable: {exc.message}")
    pinned: dict[str, bool] = {}
    python_env: dict[str, bool] = {}
    for runtime in runtimes:
        if runtime.pinned and runtime.certifiable:
            (pinned if runtime.package.kind == "oci" else python_env)[runtime.backend] = True
    return CatalogView(pinned=pinned, python_env=python_env)


def _catalog_reason(catalog: CatalogView, device: DeviceName) -> str:
    label = "CPU" if device == "cpu" else "CUDA"
    reason = f"no pinned SGLang {label} image in the runtime catalog"
    return f"{reason} ({catalog.problem})" if catalog.problem else reason


def _docker_reasons(docker: DockerFactsV1) -> list[str]:
    if not docker.reachable:
        return [docker.reason or f"Docker not reachable at {docker.host}"]
    reasons: list[str] = []
    if docker.os_type is not None and docker.os_type.lower() != "linux":
        reasons.append(f"Docker engine runs {docker.os_type} containers; the SGLang images are linux/amd64")
    if docker.architecture is not None and docker.architecture.lower() not in _X86_64:
        reasons.append(f"Docker engine architecture is {docker.architecture}; the SGLang images are linux/amd64")
    return reasons


def cpu_verdict(host: HostFactsV1, cpu: CpuFactsV1, docker: DockerFactsV1, catalog: CatalogView) -> DeviceVerdictV1:
    reasons: list[str] = []
    if host.arch.lower() not in _X86_64:
        reasons.append(f"host architecture is {host.arch}; the SGLang CPU engine needs x86_64 with Intel AMX")
    if not cpu.amx:
        missing = [flag for flag in AMX_FLAGS if flag not in cpu.isa_flags]
        reasons.append(f"CPU lacks AMX ({', '.join(missing)}): the SGLang CPU engine needs Intel AMX")
    reasons.extend(_docker_reasons(docker))
    if not catalog.has_pinned("cpu"):
        reasons.append(_catalog_reason(catalog, "cpu"))
    can_do = [FAKE_ENGINE]
    if cpu.avx2:
        can_do.append("generic-CPU SGLang runtime (provisional)")
    if not reasons:
        can_do.append("SGLang CPU image from the catalog (certified)")
    return DeviceVerdictV1(certifiable=not reasons, reasons=reasons, can_do=can_do)


def gpu_reasons(cuda: CudaFactsV1) -> list[str]:
    """Why this machine's GPUs cannot run a CUDA engine at all (empty when a usable GPU and driver are there)."""
    if cuda.simulated:  # first: a simulation must never look like a driver problem or pass for a GPU
        return [f"NVML is simulated ({SIMULATED_NVML_ENV}): tests only, no real GPU"]
    if not cuda.available:
        return [cuda.reason or "no NVIDIA driver"]
    reasons: list[str] = []
    if cuda.driver_major is None or cuda.driver_major < MIN_DRIVER_MAJOR:
        reasons.append(f"NVIDIA driver {cuda.driver_version} is too old: CUDA 13 images need driver >= {MIN_DRIVER_MAJOR}")
    if not cuda.gpus:
        reasons.append("no NVIDIA GPU visible to NVML")
    elif not any(_cc(gpu.compute_capability) >= CUDA_MIN_COMPUTE_CAPABILITY for gpu in cuda.gpus):
        found = ", ".join(sorted({gpu.compute_capability for gpu in cuda.gpus}))
        need = ".".join(str(n) for n in CUDA_MIN_COMPUTE_CAPABILITY)
        reasons.append(f"no GPU with compute capability >= {need} (CUDA 13 minimum); found {found}")
    return reasons


def _cc(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def cuda_verdict(cuda: CudaFactsV1, docker: DockerFactsV1, catalog: CatalogView) -> DeviceVerdictV1:
    """Certifiable: a usable GPU and driver, and either a certifiable python-env CUDA runtime (process launcher,
    no Docker needed) or a pinned CUDA image with Docker's nvidia runtime."""
    gpu_problems = gpu_reasons(cuda)
    image_problems = _docker_reasons(docker)
    if docker.reachable and not docker.nvidia_runtime:
        image_problems.append("Docker has no 'nvidia' runtime (NVIDIA Container Toolkit not configured)")
    if not catalog.has_pinned("cuda"):
        image_problems.append(_catalog_reason(catalog, "cuda"))
    env_ok = catalog.has_python_env("cuda")
    reasons = gpu_problems + ([] if env_ok else image_problems)
    can_do = [FAKE_ENGINE]
    if not gpu_problems:
        can_do.append("NVML evidence and CUDA checks that need no image (process launcher; recorded, never certified)")
        if env_ok:
            can_do.append("certifiable CUDA python-env runtime from the catalog (process launcher, certified)")
        if not image_problems:
            can_do.append("SGLang CUDA image from the catalog (certified)")
    return DeviceVerdictV1(certifiable=not reasons, reasons=reasons, can_do=can_do)


def select_device(requested: RequestedDevice, verdicts: Mapping[DeviceName, DeviceVerdictV1]) -> tuple[DeviceName | None, str]:
    """auto: cuda if certifiable, else cpu if certifiable, else none; cpu/cuda: that one if certifiable."""
    order: list[DeviceName] = ["cuda", "cpu"] if requested == "auto" else [requested]
    for device in order:
        if verdicts[device].certifiable:
            return device, f"{device} is certifiable on this machine"
    why = "; ".join(f"{device}: {verdicts[device].reasons[0]}" for device in order)
    return None, f"no certifiable device ({why})"


def _host_facts(root: Path) -> HostFactsV1:
    return HostFactsV1(
        hostname=socket.gethostname(),
        os=platform.system().lower(),
        kernel=platform.release(),
        arch=platform.machine(),
        python=platform.python_version(),
        hitch_root=str(root),
        hitch_root_exists=root.exists(),
    )


def run_doctor(
    device: RequestedDevice = "auto",
    *,
    root: Path | None = None,
    sys_root: Path = Path("/"),
    nvml: NvmlProvider | None = None,
    docker_factory: Callable[[], DockerApi] | None = None,
    pinned_images: Mapping[str, bool] | None = None,
    catalog_path: Path | None = None,
) -> DoctorReportV1:
    """Gather every fact and the verdicts for ``device``; reads only, writes nothing.

    ``pinned_images`` (``{"cpu": True, ...}``) replaces the catalog scan when given.
    """
    host = _host_facts(resolve_root(root))
    cpu = probe_cpu(sys_root)
    cuda = probe_cuda(nvml)
    docker = probe_docker(docker_factory)
    catalog = CatalogView(pinned=dict(pinned_images)) if pinned_images is not None else read_catalog(catalog_path)
    all_verdicts: dict[DeviceName, DeviceVerdictV1] = {
        "cpu": cpu_verdict(host, cpu, docker, catalog),
        "cuda": cuda_verdict(cuda, docker, catalog),
    }
    wanted: list[DeviceName] = ["cpu", "cuda"] if device == "auto" else [device]
    selected, selected_reason = select_device(device, all_verdicts)
    return DoctorReportV1(
        requested_device=device,
        host=host,
        cpu=cpu,
        cuda=cuda,
        docker=docker,
        devices={name: all_verdicts[name] for name in wanted},
        selected=selected,
        selected_reason=selected_reason,
    )


def fingerprint_record(report: DoctorReportV1, device: DeviceName, gpu_index: int = 0) -> HardwareFingerprintV1:
    """The evidence record's short view of this machine for ``device`` (first GPU unless told).

    The full fingerprint (signed entries, run pages) is :func:`harness.devices.fingerprint.hardware_fingerprint`.
    """
    gpu = next((g for g in report.cuda.gpus if g.index == gpu_index), None) if device == "cuda" else None
    return HardwareFingerprintV1(
        device=device,
        cpu_model=report.cpu.model_name,
        cpu_flags=report.cpu.isa_flags,
        numa_nodes=len(report.cpu.numa_nodes),
        gpu_name=gpu.name if gpu else None,
        gpu_uuid=gpu.uuid if gpu else None,
        driver_version=report.cuda.driver_version if device == "cuda" else None,
        compute_capability=gpu.compute_capability if gpu else None,
    )
