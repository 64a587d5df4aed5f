"""Read-only machine facts and verdicts: CPU (ISA incl. AMX, NUMA), CUDA (NVML), Docker.

``run_doctor`` gathers them into a ``DoctorReportV1``; nothing in this package writes. The report's parts
(``CpuFactsV1``, ``DeviceVerdictV1``, ...) are imported from :mod:`harness.devices.report` by the few that need them.
"""

from __future__ import annotations

from harness.devices.cpu import probe_cpu
from harness.devices.cuda import MIN_DRIVER_MAJOR, NvmlProvider, PynvmlProvider, probe_cuda
from harness.devices.docker_probe import DockerApi, probe_docker
from harness.devices.doctor import CatalogView, fingerprint_record, gpu_reasons, read_catalog, run_doctor, select_device
from harness.devices.fingerprint import fingerprint_of, hardware_fingerprint
from harness.devices.report import DoctorReportV1

__all__ = [
    "MIN_DRIVER_MAJOR",
    "CatalogView",
    "DockerApi",
    "DoctorReportV1",
    "NvmlProvider",
    "PynvmlProvider",
    "fingerprint_of",
    "fingerprint_record",
    "gpu_reasons",
    "hardware_fingerprint",
    "probe_cpu",
    "probe_cuda",
    "probe_docker",
    "read_catalog",
    "run_doctor",
    "select_device",
]
