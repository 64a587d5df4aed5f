"""CPU probe: ISA flags, NUMA layout and memory from a fake /proc + /sys tree and from this host."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.devices.cpu import count_physical_cores, parse_cpuinfo, parse_cpulist, probe_cpu, read_memory
from tests.harness.devices.fakes import AMX_XEON_FLAGS, NO_AMX_FLAGS, make_sys_tree


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3", [0, 1, 2, 3]), ("0-1,4,6-7", [0, 1, 4, 6, 7]), ("", []), ("5\n", [5])],
)
def test_parse_cpulist(text: str, cpus: list[int]) -> None:
    assert parse_cpulist(text) == cpus


def test_parse_cpuinfo_takes_first_processor_and_counts_all() -> None:
    first, count = parse_cpuinfo("processor : 0\nflags : a b\n\nprocessor : 1\nflags : c\n")
    assert first["flags"] == "a b"
    assert count == 2


def test_amx_xeon_tree_reports_amx_avx512_and_smallest_node(tmp_path: Path) -> None:
    root = make_sys_tree(tmp_path, flags=AMX_XEON_FLAGS, processors=8, nodes={0: "0-4", 1: "5-7", 2: ""})
    cpu = probe_cpu(root)
    assert cpu.vendor == "GenuineIntel"
    assert cpu.model_name == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu.amx and cpu.avx512 and cpu.avx2
    assert cpu.isa_flags == sorted(cpu.isa_flags)
    assert {"amx_tile", "amx_bf16", "amx_int8", "avx512f", "avx512_bf16", "avx2", "avx_vnni"} <= set(cpu.isa_flags)
    assert "fpu" not in cpu.isa_flags
    assert cpu.logical_cores == 8
    assert [(n.node, n.cpus) for n in cpu.numa_nodes] == [(0, 5), (1, 3), (2, 0)]
    # the memory-only node 2 does not count as the smallest node
    assert cpu.cores_per_node == 3
    assert cpu.memory_total_bytes == 16 * 1024**3
    assert cpu.memory_available_bytes == 8 * 1024**3
    assert cpu.shm_total_bytes is not None and cpu.shm_total_bytes > 0


def test_physical_cores_count_distinct_package_and_core_ids(tmp_path: Path) -> None:
    cpu = probe_cpu(make_sys_tree(tmp_path, processors=8, threads_per_core=2))
    assert (cpu.logical_cores, cpu.physical_cores) == (8, 4)
    two_packages = "".join(f"processor : {i}\nphysical id : {i // 2}\ncore id : 0\n\n" for i in range(4))
    assert count_physical_cores(two_packages) == 2


def test_physical_cores_are_unknown_without_topology(tmp_path: Path) -> None:
    assert probe_cpu(make_sys_tree(tmp_path, processors=4)).physical_cores is None


def test_desktop_tree_without_amx(tmp_path: Path) -> None:
    cpu = probe_cpu(make_sys_tree(tmp_path, flags=NO_AMX_FLAGS, vendor="AuthenticAMD"))
    assert not cpu.amx
    assert not cpu.avx512
    assert cpu.avx2
    assert cpu.isa_flags == ["avx2"]


def test_amx_tile_alone_is_not_amx(tmp_path: Path) -> None:
    cpu = probe_cpu(make_sys_tree(tmp_path, flags="avx2 amx_tile"))
    assert not cpu.amx
    assert cpu.isa_flags == ["amx_tile", "avx2"]


def test_missing_numa_sysfs_means_one_node_with_all_cpus(tmp_path: Path) -> None:
    root = make_sys_tree(tmp_path, processors=6, nodes={})
    cpu = probe_cpu(root)
    assert [(n.node, n.cpus) for n in cpu.numa_nodes] == [(0, 6)]
    assert cpu.cores_per_node == 6


def test_missing_dev_shm_is_null(tmp_path: Path) -> None:
    root = make_sys_tree(tmp_path)
    (root / "dev" / "shm").rmdir()
    cpu = probe_cpu(root)
    assert cpu.shm_total_bytes is None
    assert cpu.shm_free_bytes is None


def test_memory_falls_back_to_sysconf_without_meminfo(tmp_path: Path) -> None:
    total, available = read_memory(tmp_path)
    assert total > 0
    assert 0 <= available <= total


def test_this_host_matches_proc_cpuinfo() -> None:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    first, _ = parse_cpuinfo(cpuinfo)
    flags = set(first.get("flags", "").split())
    cpu = probe_cpu()
    assert cpu.amx == ({"amx_tile", "amx_bf16"} <= flags)
    assert cpu.avx2 == ("avx2" in flags)
    assert cpu.logical_cores >= 1
    assert 1 <= cpu.cores_per_node <= cpu.logical_cores
