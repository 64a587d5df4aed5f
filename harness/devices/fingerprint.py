"""The hardware fingerprint a run's evidence carries: what a third party needs to know the machine.

Built from the read-only doctor (:func:`harness.devices.run_doctor`): CPU model, ISA flags, cores, NUMA
layout and memory size; on ``cuda`` every GPU's name, UUID, compute capability and memory, the driver and
the CUDA version it supports. Volatile readings (free memory) are left out: the same machine gives the
same fingerprint.
"""

from __future__ import annotations

from typing import Any

from harness.devices.doctor import run_doctor

__all__ = ["hardware_fingerprint"]


def _no_docker() -> object:
    raise RuntimeError("not probed: Docker is no hardware")


def hardware_fingerprint(device: str) -> dict[str, Any]:
    """The fingerprint of this machine for ``device`` (``cpu`` | ``cuda``), JSON-ready."""
    dev = "cuda" if device == "cuda" else "cpu"
    report = run_doctor(dev, docker_factory=_no_docker, pinned_images={})  # type: ignore[arg-type]
    cpu = report.cpu
    out: dict[str, Any] = {
        "device": dev,
        "arch": report.host.arch,
        "os": report.host.os,
        "kernel": report.host.kernel,
        "cpu_vendor": cpu.vendor,
        "cpu_model": cpu.model_name,
        "cpu_flags": list(cpu.isa_flags),
        "logical_cores": cpu.logical_cores,
        "numa_nodes": [{"node": n.node, "cpulist": n.cpulist, "cpus": n.cpus} for n in cpu.numa_nodes],
        "memory_total_bytes": cpu.memory_total_bytes,
    }
    if dev == "cuda":
        cuda = report.cuda
        out["driver_version"] = cuda.driver_version
        out["cuda_driver_version"] = cuda.cuda_driver_version
        out["gpus"] = [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "compute_capability": g.compute_capability,
                "memory_total_bytes": g.memory_total_bytes,
            }
            for g in cuda.gpus
        ]
    return out
