"""What this machine and root hold, as an entry point reads it (certify's outputs, model facts, references):
a model's manifest, files and parameter count, an installed runtime, the machine's doctor facts and identity.

The core's own functions (:mod:`harness.store`, :mod:`harness.runtimes`, :mod:`harness.devices`) do the work;
these are what an entry point above the app layer calls instead of reaching below it.

Example::

    hardware, doctor = machine_facts("cpu")  # the fingerprint an entry records, and the doctor's report
    same_machine = machine_identity(hardware) == machine_identity(other_entry_hardware)
    count = parameter_count(root, model_id)  # from the safetensors headers, no tensor loaded
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from harness.contracts.model import LocalModelManifestV1
from harness.devices import DoctorReportV1, fingerprint_of, run_doctor
from harness.devices.fingerprint import machine_identity
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.runtimes.install import InstalledRuntime, installed_runtime
from harness.store import model_files_dir, read_manifest
from harness.store.safetensors_check import read_safetensors_header

__all__ = [
    "DoctorReportV1",
    "installed_runtime_named",
    "machine_facts",
    "machine_identity",
    "model_files",
    "model_manifest",
    "parameter_count",
]


def machine_facts(device: str) -> tuple[dict[str, Any], DoctorReportV1]:
    """This machine's hardware fingerprint for ``device`` and the doctor record it was built from."""
    doctor = run_doctor("cuda" if device == "cuda" else "cpu" if device == "cpu" else "auto")
    return fingerprint_of(doctor, device), doctor


def model_manifest(root: HitchRoot, model_id: str) -> LocalModelManifestV1:
    """The published manifest of ``model_id`` in ``root``."""
    return read_manifest(root, model_id)


def model_files(root: HitchRoot, model_id: str) -> Path:
    """The checkpoint directory of a published model (what the engine loads)."""
    return model_files_dir(root, model_id)


def parameter_count(root: HitchRoot, model_id: str) -> int:
    """The sum of the element counts of a published model's tensors, read from its safetensors headers."""
    manifest = read_manifest(root, model_id)
    files = model_files_dir(root, model_id)
    return sum(
        math.prod(t.shape)
        for shard in manifest.weights.shards
        for t in read_safetensors_header(files / shard, shard).tensors.values()
    )


def installed_runtime_named(root: HitchRoot, name_or_runtime_id: str) -> InstalledRuntime | None:
    """The catalog runtime of this name installed (python-env) in ``root``, verified; None when absent."""
    return installed_runtime(root, get_runtime(name_or_runtime_id))
