"""Only the pinned Codex binary is ever run."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.agents import codex_install
from harness.agents.codex_install import CODEX_VERSION, find_codex
from harness.errors import HitchError


def _fake_binary(prefix: Path, version: str) -> Path:
    binary = prefix / codex_install._NATIVE
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\necho 'codex-cli {version}'\n")
    binary.chmod(0o755)
    return binary


def test_missing_install_names_the_setup_command(tmp_path: Path) -> None:
    with pytest.raises(HitchError) as err:
        find_codex(tmp_path / "nothing")
    assert err.value.code == "harness_unavailable" and "make codex" in err.value.message


def test_another_version_is_refused(tmp_path: Path) -> None:
    _fake_binary(tmp_path, "0.1.0")
    with pytest.raises(HitchError) as err:
        find_codex(tmp_path)
    assert err.value.code == "harness_unavailable" and "0.1.0" in err.value.message


def test_the_pinned_version_is_found_with_its_digest(tmp_path: Path) -> None:
    binary = _fake_binary(tmp_path, CODEX_VERSION)
    found = find_codex(tmp_path)
    assert found.binary == binary and found.artifact == f"npm:@openai/codex@{CODEX_VERSION}"
    assert found.binary_digest.startswith("sha256:")
