"""Fixtures every test package shares: one tiny checkpoint per test session (built once, byte-stable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.checkpoint import tiny_checkpoint_cached


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama checkpoint (``fixture:tiny``); under xdist each worker shares one cache."""
    return tiny_checkpoint_cached(tmp_path_factory.getbasetemp().parent / "tiny-ckpt")
