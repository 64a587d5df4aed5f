"""The setup scripts under scripts/ci load and parse their arguments: a script that no longer imports (a
helper renamed in a sibling it imports from) would only show on a fresh machine, where ``make`` runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts" / "ci").glob("build_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_each_image_builder_loads_and_answers_help(script: Path) -> None:
    proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout
