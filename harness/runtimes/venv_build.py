"""Building a private venv from a hash-pinned requirements file, for the runtimes and for the tools (Harbor) alike.

Owns the steps every private install shares: run a step with its output streamed (a failure raises the
caller's error code with the output's tail), measure a folder, point a venv built in a staging folder at
its published path, drop the staging folders a crash left, and the ``pip install --require-hashes
--no-deps --only-binary :all:`` of a requirements file into a new venv.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import TextIO

from harness.errors import HitchError

__all__ = ["clean_leftovers", "dir_bytes", "install_requirements", "publish", "retarget_scripts", "stream_command"]


def stream_command(cmd: list[str], progress: TextIO, code: str, env: dict[str, str] | None = None) -> None:
    """Run ``cmd``; its output goes to ``progress``; a non-zero exit raises ``code`` with the last lines."""
    progress.write("+ " + " ".join(cmd) + "\n")
    progress.flush()
    tail: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            progress.write(line)
            progress.flush()
            tail = [*tail[-19:], line.rstrip("\n")]
    if proc.returncode != 0:
        raise HitchError(
            code,
            f"install step failed (exit {proc.returncode}): {cmd[2] if len(cmd) > 2 else cmd[0]}",
            {"command": cmd, "output_tail": tail},
        )


def install_requirements(base_python: str, venv: Path, requirements: Path, progress: TextIO, code: str) -> Path:
    """``base_python -m venv venv`` then the requirements, hash-checked, wheels only; returns the venv's python."""
    stream_command([base_python, "-m", "venv", str(venv)], progress, code)
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    stream_command(
        [*pip, "install", "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(requirements)], progress, code
    )
    return py


def dir_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def retarget_scripts(venv: Path, old: Path, new: Path) -> None:
    """Point the venv's bin/ scripts (shebangs, activate) at the published path."""
    for script in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]:
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if str(old).encode() in data and b"\0" not in data[:1024]:
            script.write_bytes(data.replace(str(old).encode(), str(new).encode()))


def clean_leftovers(base: Path, hex_id: str) -> None:
    for stale in base.glob(f".staging-{hex_id}-*"):
        shutil.rmtree(stale, ignore_errors=True)


def publish(staging: Path, final: Path) -> None:
    """Replace ``final`` by the finished ``staging`` folder (a broken earlier install is moved out, then dropped)."""
    if final.exists():
        trash = final.parent / f".staging-{final.name}-old-{uuid.uuid4().hex[:8]}"
        os.replace(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(staging, final)
