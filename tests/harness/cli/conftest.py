"""Fixtures of the CLI tests: a root holding ``local/tiny``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cli.cli_support import hitch, ok_json


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with the tiny checkpoint imported as ``local/tiny``."""
    base = tmp_path_factory.mktemp("cli-root")
    root = base / "root"
    ok_json(hitch(root, "fixtures", "checkpoint", str(base / "tiny"), "--json"))
    ok_json(hitch(root, "models", "add", str(base / "tiny"), "--name", "tiny", "--json"))
    return root
