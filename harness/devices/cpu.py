"""CPU facts: vendor, ISA flags (AMX, AVX-512, AVX2), cores, NUMA layout, memory, /dev/shm.

Read-only: /proc/cpuinfo, /proc/meminfo, /sys/devices/system/node/node*/cpulist and
statvfs(/dev/shm) (plain files rather than psutil, so a fake ``sys_root`` tree can stand
in for the machine in tests).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.devices.report import CpuFactsV1, NumaNodeV1

__all__ = ["AMX_FLAGS", "count_physical_cores", "parse_cpuinfo", "parse_cpulist", "probe_cpu", "read_memory", "read_numa_nodes"]

AMX_FLAGS = ("amx_tile", "amx_bf16")
_EXTRA_FLAGS = frozenset({"avx2", "avx_vnni", "avx_vnni_int8", "avx_ne_convert"})
_NODE_DIR = re.compile(r"^node(\d+)$")


def parse_cpuinfo(text: str) -> tuple[dict[str, str], int]:
    """The first processor's fields and the number of processor entries."""
    first: dict[str, str] = {}
    processors = 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "processor":
            processors += 1
        if processors <= 1 and key not in first:
            first[key] = value.strip()
    return first, processors


def count_physical_cores(text: str) -> int | None:
    """Distinct (``physical id``, ``core id``) pairs of /proc/cpuinfo; None when it names no core ids.

    Some hypervisors and non-x86 kernels leave the topology out; then the count is unknown, never guessed.
    """
    cores: set[tuple[str, str]] = set()
    package = core = None
    for line in [*text.splitlines(), ""]:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            package = value.strip()
        elif key == "core id":
            core = value.strip()
        elif not line.strip():  # a blank line closes one processor's block
            if core is not None:
                cores.add((package or "0", core))
            package = core = None
    return len(cores) or None


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8,10-11`` → [0, 1, 2, 3, 8, 10, 11]; an empty list for memory-only nodes."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if sep:
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(lo))
    return cpus


def read_numa_nodes(sys_root: Path) -> list[NumaNodeV1]:
    base = sys_root / "sys" / "devices" / "system" / "node"
    nodes: list[NumaNodeV1] = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return nodes
    for entry in entries:
        match = _NODE_DIR.match(entry.name)
        if match is None:
            continue
        try:
            cpulist = (entry / "cpulist").read_text().strip()
            cpus = len(parse_cpulist(cpulist))
        except (OSError, ValueError):
            continue
        nodes.append(NumaNodeV1(node=int(match.group(1)), cpulist=cpulist, cpus=cpus))
    return sorted(nodes, key=lambda n: n.node)


def _isa_flags(flags: set[str]) -> list[str]:
    return sorted(f for f in flags if f.startswith(("amx", "avx512")) or f in _EXTRA_FLAGS)


def _usable_cores(fallback: int) -> int:
    try:
        return len(os.sched_getaffinity(0)) or fallback
    except (AttributeError, OSError):
        return fallback


def _shm(sys_root: Path) -> tuple[int | None, int | None]:
    try:
        st = os.statvfs(sys_root / "dev" / "shm")
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def read_memory(sys_root: Path) -> tuple[int, int]:
    """(total, available) bytes from /proc/meminfo; sysconf when it cannot be read."""
    fields: dict[str, int] = {}
    try:
        for line in (sys_root / "proc" / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                fields[key.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    except OSError:
        pass
    if "MemTotal" in fields:
        return fields["MemTotal"], fields.get("MemAvailable", fields.get("MemFree", 0))
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page


def probe_cpu(sys_root: Path = Path("/")) -> CpuFactsV1:
    try:
        text = (sys_root / "proc" / "cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    first, processors = parse_cpuinfo(text)
    flags = set((first.get("flags") or first.get("Features") or "").split())
    logical = processors or os.cpu_count() or 1
    nodes = read_numa_nodes(sys_root)
    if not nodes:
        nodes = [NumaNodeV1(node=0, cpulist=f"0-{logical - 1}", cpus=logical)]
    with_cpus = [n.cpus for n in nodes if n.cpus > 0]
    memory_total, memory_available = read_memory(sys_root)
    shm_total, shm_free = _shm(sys_root)
    return CpuFactsV1(
        vendor=first.get("vendor_id") or first.get("CPU implementer"),
        model_name=first.get("model name"),
        isa_flags=_isa_flags(flags),
        amx=all(f in flags for f in AMX_FLAGS),
        avx512="avx512f" in flags,
        avx2="avx2" in flags,
        logical_cores=logical,
        physical_cores=count_physical_cores(text),
        usable_cores=_usable_cores(logical),
        numa_nodes=nodes,
        cores_per_node=min(with_cpus) if with_cpus else logical,
        memory_total_bytes=memory_total,
        memory_available_bytes=memory_available,
        shm_total_bytes=shm_total,
        shm_free_bytes=shm_free,
    )
