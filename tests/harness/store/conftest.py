"""Fixtures for store tests: a fresh HITCH_ROOT, checkpoint writers, and "nothing published" checks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.paths import HitchRoot
from tests.harness.store.checkpoint_builder import write_checkpoint


@pytest.fixture
def hroot(tmp_path: Path) -> HitchRoot:
    return HitchRoot(tmp_path / "hitch-root")


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "ckpt")


@pytest.fixture
def sharded_checkpoint(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "ckpt-sharded", sharded=True)


def _entries(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def assert_nothing_published(root: HitchRoot) -> None:
    """No manifest, no model-files object, no alias, and an empty staging area."""
    assert _entries(root.models) == []
    assert _entries(root.model_files) == []
    assert _entries(root.staging) == []
    assert not root.aliases_file.exists()


@pytest.fixture
def nothing_published() -> Callable[[HitchRoot], None]:
    return assert_nothing_published
