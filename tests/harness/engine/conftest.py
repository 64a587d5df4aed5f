"""Fixtures of the engine adapter tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs


@pytest.fixture
def inputs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> ServiceInputs:
    return service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))
