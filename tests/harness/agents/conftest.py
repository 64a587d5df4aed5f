"""Fixtures of the agent tests: the pinned Codex binary (``make codex``), skipped without it unless
``HITCH_REQUIRE_CODEX`` is set."""

from __future__ import annotations

import pytest

from harness.agents.codex_install import CodexInstall, find_codex
from harness.errors import HitchError
from tests.components import missing


@pytest.fixture(scope="module")
def codex() -> CodexInstall:
    try:
        return find_codex()
    except HitchError as exc:
        missing("codex", f"Codex not installed: {exc.message}")
