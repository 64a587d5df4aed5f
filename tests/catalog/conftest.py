"""Shared fixtures for the catalog tests: a predicate and two independent key pairs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from catalog.signing import KeyPair, generate_key
from tests.catalog.support import make_predicate


@pytest.fixture
def predicate() -> dict[str, Any]:
    return make_predicate()


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    return generate_key(tmp_path / "keys" / "signer.pem")


@pytest.fixture
def other_key(tmp_path: Path) -> KeyPair:
    return generate_key(tmp_path / "other" / "signer.pem")
