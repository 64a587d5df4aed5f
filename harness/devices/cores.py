"""Which CPU cores a CPU engine runs on (spec §8.2): ``count`` usable cores of one NUMA node.

The cores come from this process's own affinity (a container or ``taskset`` narrows it) intersected with a
NUMA node's cpulist, taking the node with the most usable cores so the engine's threads and memory stay on
one node. Not a ledger: two CPU services of one root may be given the same cores (a recorded limitation).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.devices.cpu import parse_cpulist
from harness.errors import HitchError

__all__ = ["pick_cores"]


def _nodes(sys_root: Path) -> list[list[int]]:
    base = sys_root / "sys" / "devices" / "system" / "node"
    nodes: list[list[int]] = []
    for path in sorted(base.glob("node[0-9]*/cpulist")):
        cpus = parse_cpulist(path.read_text())
        if cpus:
            nodes.append(cpus)
    return nodes


def pick_cores(count: int, *, sys_root: Path = Path("/"), usable: set[int] | None = None) -> list[int]:
    """``count`` cores (ascending) within one NUMA node, from ``usable`` (default: this process's affinity)."""
    allowed = usable if usable is not None else set(os.sched_getaffinity(0))
    nodes = [[c for c in cpus if c in allowed] for cpus in _nodes(sys_root)] or [sorted(allowed)]
    best = max(nodes, key=len)
    if len(best) < count:
        raise HitchError(
            "inference_capacity_exceeded",
            f"the lock runs {count} CPU threads but one NUMA node offers {len(best)} usable cores",
            {"cpu_threads": count, "usable_cores_on_one_node": len(best)},
        )
    return best[:count]
