"""Every pinned wheel of each python-env runtime resolves on the package index pip would use (network; slow).

Asks the index's simple API for each pin's project page (PEP 691 JSON where served) and requires a file with
exactly the pinned sha256 that is not yanked; nothing is downloaded (the CUDA runtime's ~4.4 GB of wheels stay
where they are). A yanked, missing or re-uploaded wheel fails the test by name, before a GPU machine spends its
time finding out. The index asked (and where pip's configuration named it) is printed and in every failure.
"""

from __future__ import annotations

import pytest

from harness.runtimes import get_runtime, load_catalog, runtime_source_dir
from harness.runtimes.catalog import requirement_pins
from harness.runtimes.index_plan import install_plan

pytestmark = [pytest.mark.slow]

PYTHON_ENV_RUNTIMES = [m.name for m in load_catalog(operator_pins=False) if m.package.kind == "python-env"]


def test_the_cuda_runtime_is_among_them() -> None:
    assert "sglang-0.5.23-cuda" in PYTHON_ENV_RUNTIMES


@pytest.mark.parametrize("name", PYTHON_ENV_RUNTIMES)
def test_every_pinned_wheel_resolves_on_pips_index(name: str) -> None:
    manifest = get_runtime(name)
    plan = install_plan(manifest)
    asked = f"asked {plan.index_url} ({plan.index_source})"
    print(f"{name}: {len(plan.pins)} pins, {plan.total_bytes} bytes; {asked}")
    assert [f"{p.name}=={p.version}: {p.status}: {p.detail}" for p in plan.problems] == [], asked
    assert manifest.package.kind == "python-env"
    pins = requirement_pins((runtime_source_dir(name) / manifest.package.lock_file.path).read_text())
    assert [(p.name, p.version) for p in plan.pins] == [(p.name, p.version) for p in pins], asked
    for check in plan.pins:  # the very file the lock pins, as the index lists it
        assert check.file is not None and check.file.sha256 in next(p.sha256s for p in pins if p.name == check.name)
