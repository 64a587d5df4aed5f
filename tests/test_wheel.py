"""The built wheel certifies without the checkout: ``pip wheel`` of the tracked sources, installed into a fresh
venv, runs ``pytest --pyargs certify --engine fake`` from a folder outside the checkout to a signed entry.

The fresh venv sees the project's third-party dependencies (a folder of links into this venv's site-packages,
without hitch's own editable install) and nothing of the checkout: the test asserts where ``harness`` and
``certify`` are imported from, and that the entry was signed by the development key of the run's own root.
The pinned Codex CLI is not Python: where it is installed (``make codex``) the run gets it through
``HITCH_CODEX_PREFIX`` and the level is ``contract``; where it is not, exactly the Codex checks stay unpassed.
Slow (a wheel build and a whole contract run), so ``make test`` runs it and ``make check`` does not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from catalog.signing import dev_keys_dir, load_entry, verify_envelope
from harness.agents.codex_install import default_prefix, find_codex
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.settings import env_name

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.integration]
OURS = ("hitch_local_inference", "__editable__", "zz_")  # this checkout's install in the test's own venv


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{argv}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def _sources(into: Path) -> Path:
    """The tracked files of the checkout, copied (what a release builds from; no build/ or caches of ours)."""
    listed = _run(["git", "ls-files", "-z"], REPO).split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, into / rel)
    return into


def _fresh_venv(base: Path, wheel: Path) -> Path:
    """A new venv with the wheel installed and this venv's third-party packages (never our own) on its path."""
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base).strip())
    deps = base / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(OURS) and entry.name != "__pycache__":
            (deps / entry.name).symlink_to(entry)
    (site / "deps.pth").write_text(f"{deps}\n")
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel)], base)
    return python


def _codex() -> Path | None:
    """The pinned Codex CLI's prefix when it is installed here (``make codex``), else None."""
    try:
        find_codex()
    except HitchError:
        return None
    return default_prefix()


def test_the_installed_wheel_runs_a_contract_certification_to_a_signed_entry(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(_sources(tmp_path / "src"))], tmp_path)
    [wheel] = dist.glob("hitch_local_inference-*.whl")
    python = _fresh_venv(tmp_path, wheel)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITCH_", "PYTEST_", "PYTHON"))}
    root = HitchRoot(tmp_path / "root")
    env[env_name("root")] = str(root.path)
    codex = _codex()
    if codex is not None:
        env[env_name("codex_prefix")] = str(codex)

    code = "import json, harness, certify; print(json.dumps([harness.__file__, certify.__file__]))"
    where = json.loads(_run([str(python), "-c", code], outside, env))
    site = python.parents[1]
    assert all(Path(p).is_relative_to(site) for p in where), where  # the wheel's files, not the checkout's

    out = tmp_path / "report"
    argv = [str(python), "-m", "pytest", "--pyargs", "certify", "--engine", "fake", "--device", "cpu"]
    # beside the other tests (conftest's HITCH_CERTIFY_QUIET_LOAD does not reach this env): timings read, not enforced
    argv += ["-n", "2", "-p", "no:cacheprovider", "--report-dir", str(out), "--quiet-load", "off"]
    proc = subprocess.run(argv, cwd=outside, env=env, capture_output=True, text=True, timeout=1800, check=False)
    text = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == (0 if codex is not None else pytest.ExitCode.TESTS_FAILED), text
    [entry] = out.glob("*.dsse.json")
    predicate = verify_envelope(load_entry(entry), [dev_keys_dir(root)]).predicate
    assert predicate["engine"] == "fake" and predicate["device"] == "cpu"
    unpassed = {c["id"] for c in predicate["checks"] if c["required"] and c["status"] != "passed"}
    if codex is not None:
        assert (predicate["level"], unpassed) == ("contract", set()), predicate["reasons"]
    else:  # only what needs the Codex binary, which no wheel carries
        assert predicate["level"] == "failed" and unpassed and all(c.startswith("agents.codex.") for c in unpassed), unpassed
    assert (out / "run.html").is_file() and not (outside / "reports").exists()  # --report-dir was honoured
