"""The hardware fingerprint: what a signed entry, a run page and run evidence say about the machine.

One function builds it, from the doctor's record (:mod:`harness.devices.doctor`), so every consumer shows the
same facts: the CPU model and vendor, the ISA flags that matter (AMX, AVX-512, AVX2 ...), logical, physical and
usable cores, the NUMA layout, memory, the host, Docker's relevant facts and, on cuda, the driver and every
GPU's NVML facts. It is a plain JSON-ready mapping: it is hashed into signed entries, so nothing in it may be
a model object.
"""

from __future__ import annotations

from typing import Any

from harness.devices.doctor import run_doctor
from harness.devices.report import DoctorReportV1

__all__ = ["fingerprint_of", "hardware_fingerprint", "machine_identity"]

_CPU_FIELDS = {
    "vendor",
    "model_name",
    "isa_flags",
    "amx",
    "avx512",
    "avx2",
    "logical_cores",
    "physical_cores",
    "usable_cores",
    "numa_nodes",
    "cores_per_node",
    "memory_total_bytes",
}
_HOST_FIELDS = {"hostname", "os", "kernel", "arch", "python"}
_DOCKER_FIELDS = {"reachable", "server_version", "runtimes", "nvidia_runtime"}
_GPU_FIELDS = {"index", "uuid", "name", "compute_capability", "memory_total_bytes", "memory_free_bytes"}


def fingerprint_of(report: DoctorReportV1, device: str) -> dict[str, Any]:
    """The fingerprint of the machine ``report`` describes, for ``device`` (``cpu`` | ``cuda``)."""
    finger: dict[str, Any] = {
        "device": device,
        "cpu": report.cpu.model_dump(mode="json", include=_CPU_FIELDS),
        "host": report.host.model_dump(mode="json", include=_HOST_FIELDS),
        "docker": report.docker.model_dump(mode="json", include=_DOCKER_FIELDS),
    }
    if device == "cuda":
        cuda = report.cuda
        finger["cuda"] = {
            "available": cuda.available,
            "simulated": cuda.simulated,  # a simulated NVML (tests) is never mistaken for a GPU
            "reason": cuda.reason,
            "driver_version": cuda.driver_version,
            "cuda_driver_version": cuda.cuda_driver_version,
            "gpus": [gpu.model_dump(mode="json", include=_GPU_FIELDS) for gpu in cuda.gpus],
        }
    return finger


def hardware_fingerprint(device: str) -> dict[str, Any]:
    """The fingerprint of this machine for ``device``: runs the (read-only) doctor once."""
    wanted = device if device in ("cpu", "cuda") else "auto"
    return fingerprint_of(run_doctor(wanted), device)  # type: ignore[arg-type]


# what identifies the machine in a fingerprint: free memory, usable cores (the process's affinity), Docker and
# the Python that ran the doctor change from run to run on one machine and are left out
_IDENTITY_CPU = ("vendor", "model_name", "isa_flags", "logical_cores", "physical_cores", "numa_nodes", "memory_total_bytes")
_IDENTITY_HOST = ("hostname", "os", "kernel", "arch")
_IDENTITY_GPU = ("uuid", "name", "compute_capability", "memory_total_bytes")


def machine_identity(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The part of a fingerprint (as :func:`fingerprint_of` builds it) that names the machine and its devices:
    two runs on the same machine and device have the same identity whatever their load or allocation."""
    cpu, host = fingerprint.get("cpu") or {}, fingerprint.get("host") or {}
    out: dict[str, Any] = {
        "device": fingerprint.get("device"),
        "cpu": {k: cpu.get(k) for k in _IDENTITY_CPU},
        "host": {k: host.get(k) for k in _IDENTITY_HOST},
    }
    cuda = fingerprint.get("cuda")
    if isinstance(cuda, dict):
        out["cuda"] = {
            "driver_version": cuda.get("driver_version"),
            "gpus": [{k: g.get(k) for k in _IDENTITY_GPU} for g in cuda.get("gpus") or [] if isinstance(g, dict)],
        }
    return out
