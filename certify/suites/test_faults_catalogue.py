"""faults (catalogue): every fault mode of the fake engine has a check, and every fault check that leaves out
an engine says why."""

from __future__ import annotations

from typing import Any

from certify.kit.faults import MODE_CHECKS, fault_kind
from certify.registry import all_checks, check
from fixtures.fake_sglang.faults import FAULT_NAMES

_fault_kind = fault_kind("catalogue")


@check(
    "faults.modes.all_covered",
    description="every fault mode of the fake engine has a check; every left-out engine a reason",
    summary=lambda d: (
        f"every fault mode of the fake engine has a check; {len(d['fake_only'])} check(s) left out of real SGLang say why"
    ),
)
def test_all_fault_modes_covered(certify_record: Any) -> None:
    faults = {cid: c for cid, c in all_checks().items() if c.suite == "faults"}
    certify_record.detail("modes", sorted(FAULT_NAMES))
    certify_record.detail("fake_only", {cid: c.reason for cid, c in faults.items() if "sglang" not in c.engines})
    assert set(MODE_CHECKS) == set(FAULT_NAMES), sorted(set(FAULT_NAMES) ^ set(MODE_CHECKS))
    assert all(cid in faults for cid in MODE_CHECKS.values())
    assert len(faults) >= 20
    assert [cid for cid, c in faults.items() if c.engines != {"sglang", "fake"} and not c.reason] == []
