"""``pick_cores``: a CPU engine's cores come from one NUMA node and from this process's own affinity."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.devices.cores import pick_cores
from harness.errors import HitchError
from tests.harness.devices.fakes import make_sys_tree


def test_cores_come_from_the_node_with_most_usable_cores(tmp_path: Path) -> None:
    sys_root = make_sys_tree(tmp_path / "sys", processors=8, nodes={0: "0-3", 1: "4-7"})
    assert pick_cores(2, sys_root=sys_root, usable={0, 4, 5, 6}) == [4, 5]
    assert pick_cores(3, sys_root=sys_root, usable=set(range(8))) == [0, 1, 2]


def test_more_threads_than_one_node_offers_is_refused(tmp_path: Path) -> None:
    sys_root = make_sys_tree(tmp_path / "sys", processors=8, nodes={0: "0-3", 1: "4-7"})
    with pytest.raises(HitchError) as exc:
        pick_cores(5, sys_root=sys_root, usable=set(range(8)))
    assert exc.value.code == "inference_capacity_exceeded"
