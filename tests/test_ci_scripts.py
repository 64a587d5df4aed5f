"""The image builders load and parse their arguments: the setup scripts under scripts/ci and the builder modules
that ship in the package (``python -m fixtures.images.<name>``). A builder that no longer imports (a helper
renamed in a module it imports from) would only show on a fresh machine, where ``make`` runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "scripts" / "ci").glob("build_*.py"))
MODULES = ("fixtures.images.fake_engine", "fixtures.images.trial")
BUILDERS = [[str(s)] for s in SCRIPTS] + [["-m", m] for m in MODULES]


@pytest.mark.parametrize("builder", BUILDERS, ids=[s.stem for s in SCRIPTS] + list(MODULES))
def test_each_image_builder_loads_and_answers_help(builder: list[str]) -> None:
    proc = subprocess.run([sys.executable, *builder, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout


def test_the_fake_engine_image_carries_the_installed_sources() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fixtures.images.fake_engine", "--list-sources"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    rows = dict(line.split("\t") for line in proc.stdout.splitlines())
    assert {"fixtures/__init__.py", "fixtures/fake_sglang/__main__.py", "harness/sse.py", "harness/signals.py"} <= set(rows)
    assert not any("__pycache__" in rel or rel.startswith("harness/app") for rel in rows)
    for rel, path in rows.items():
        assert Path(path).is_file() and Path(path).as_posix().endswith(rel), (rel, path)
