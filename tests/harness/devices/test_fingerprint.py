"""The hardware fingerprint reaches the signed entry and the run page with every CPU (and, on cuda, GPU) fact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from catalog.signing import (
    build_statement,
    generate_key,
    load_entry,
    sign_envelope,
    subjects_from_predicate,
    verify_envelope,
    write_entry,
)
from harness.devices import fingerprint_of, hardware_fingerprint, probe_cpu, run_doctor
from reports.run_page import build_run_page
from tests.catalog.support import make_predicate
from tests.harness.devices.fakes import AMX_XEON_FLAGS, FakeDocker, FakeGpu, FakeNvml, make_sys_tree

GPU_A = "GPU-0b3c5a1e-0000-4000-8000-00000000000a"
GPU_B = "GPU-0b3c5a1e-0000-4000-8000-00000000000b"


def _signed_and_read_back(hardware: dict[str, Any], tmp: Path) -> dict[str, Any]:
    predicate = {
        **make_predicate("failed"),
        "reasons": [],
        "device": hardware["device"],
        "hardware": hardware,
        "checks": [],
        "metrics": {},
        "evidence": {},
    }
    key = generate_key(tmp / "keys" / "signer.pem")
    path = write_entry(
        sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), key.private_key), tmp / "out"
    )
    read: dict[str, Any] = verify_envelope(load_entry(path), key.public_key.parent).predicate
    return read


def test_cuda_fingerprint_in_a_signed_entry_and_the_run_page_with_simulated_nvml(tmp_path: Path) -> None:
    """Two GPUs come from a simulated NVML and the AMX CPU from a fake /proc tree: neither exists here."""
    sys_root = make_sys_tree(tmp_path / "sys", flags=AMX_XEON_FLAGS, processors=8, threads_per_core=2, nodes={0: "0-3", 1: "4-7"})
    nvml = FakeNvml(gpus=[FakeGpu(uuid=GPU_A), FakeGpu(uuid=GPU_B, name="NVIDIA H100", capability=(9, 0), free=10)])
    report = run_doctor("cuda", sys_root=sys_root, nvml=nvml, docker_factory=FakeDocker, pinned_images={"cuda": True})

    read = _signed_and_read_back(fingerprint_of(report, "cuda"), tmp_path)["hardware"]

    cpu = read["cpu"]
    assert cpu["model_name"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert {"amx_tile", "amx_bf16", "amx_int8", "avx512f", "avx2"} <= set(cpu["isa_flags"])
    assert cpu["amx"] is True
    assert (cpu["logical_cores"], cpu["physical_cores"]) == (8, 4)
    assert [(n["node"], n["cpulist"], n["cpus"]) for n in cpu["numa_nodes"]] == [(0, "0-3", 4), (1, "4-7", 4)]
    cuda = read["cuda"]
    assert (cuda["available"], cuda["driver_version"], cuda["cuda_driver_version"]) == (True, "580.65.06", "13.0")
    assert [(g["uuid"], g["name"], g["compute_capability"]) for g in cuda["gpus"]] == [
        (GPU_A, "NVIDIA H200", "9.0"),
        (GPU_B, "NVIDIA H100", "9.0"),
    ]
    assert cuda["gpus"][1]["memory_free_bytes"] == 10
    assert read["docker"]["nvidia_runtime"] is True

    page = build_run_page({"level": "failed", "hardware": read}, tmp_path / "page").read_text()
    for text in ("amx_tile", "cpu.physical_cores", "cpu.numa_nodes[1].cpulist", GPU_A, GPU_B, "NVIDIA H100", "580.65.06"):
        assert text in page, text


def test_cpu_fingerprint_of_this_host_has_no_gpu_section(tmp_path: Path) -> None:
    finger = hardware_fingerprint("cpu")
    host = probe_cpu()
    assert finger["device"] == "cpu" and "cuda" not in finger
    assert finger["cpu"]["isa_flags"] == host.isa_flags
    assert finger["cpu"]["logical_cores"] == host.logical_cores
    assert finger["cpu"]["physical_cores"] == host.physical_cores
    assert _signed_and_read_back(finger, tmp_path)["hardware"] == finger


def test_cuda_fingerprint_without_a_driver_records_the_reason() -> None:
    """This machine has no NVIDIA driver: the cuda section says so instead of being left out."""
    finger = hardware_fingerprint("cuda")
    assert finger["cuda"]["available"] is False
    assert "no NVIDIA driver" in finger["cuda"]["reason"]
    assert finger["cuda"]["gpus"] == []
