"""Fixtures for the gateway tests (the fake engine per module and the gateway per test are tests/conftest.py's)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.support import Engine


@pytest.fixture
def own_engines(tiny_model: Path, tmp_path: Path) -> Iterator[list[Engine]]:
    """For tests that crash or reconfigure an engine: each started engine is stopped at teardown."""
    engines: list[Engine] = []
    yield engines
    for e in engines:
        with contextlib.suppress(Exception):
            e.stop()
