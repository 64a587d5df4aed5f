"""Fixtures: a private copy of the runtime catalog that a test may edit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.runtimes import default_catalog_path

GENERIC = "sglang-0.5.23-cpu-generic"


@pytest.fixture
def catalog_copy(tmp_path: Path) -> Path:
    """``tmp/catalog/runtimes.toml`` plus the runtimes folder (no __pycache__), returned as the toml path."""
    src = default_catalog_path().parent
    dst = tmp_path / "catalog"
    dst.mkdir()
    shutil.copyfile(src / "runtimes.toml", dst / "runtimes.toml")
    shutil.copytree(src / "runtimes", dst / "runtimes", ignore=shutil.ignore_patterns("__pycache__"))
    return dst / "runtimes.toml"
