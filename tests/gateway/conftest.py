"""Fixtures for the gateway tests: one fake engine per module (reset per test), a fresh gateway per test."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.server import GatewayConfig
from tests.gateway.support import Engine, GatewayThread, start_engine


@pytest.fixture(scope="module")
def shared_engine(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    engine = start_engine(tiny_model, tmp_path_factory.mktemp("engine"))
    yield engine
    engine.stop()


@pytest.fixture
def engine(shared_engine: Engine) -> Engine:
    if not shared_engine.alive():
        pytest.fail("the shared fake engine died in an earlier test")
    shared_engine.reset()
    return shared_engine


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayThread]:
    gt = GatewayThread(GatewayConfig(state_dir=tmp_path / "gw"))
    yield gt
    gt.close()


@pytest.fixture
def own_engines(tiny_model: Path, tmp_path: Path) -> Iterator[list[Engine]]:
    """For tests that crash or reconfigure an engine: each started engine is stopped at teardown."""
    engines: list[Engine] = []
    yield engines
    for e in engines:
        with contextlib.suppress(Exception):
            e.stop()
