"""``hitch`` run as a user runs it (a subprocess), and what the CLI tests read from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.paths import HitchRoot

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]


def hitch(root: Path | None, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``hitch ARGS --root ROOT``, or without ``--root`` when ``root`` is None (no Docker: a test of the CLI
    never reaches one by accident)."""
    return subprocess.run(
        [*HITCH, *args, *(("--root", str(root)) if root is not None else ())],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
        check=False,
    )


def ok_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON document of a successful ``--json`` command."""
    assert proc.returncode == 0, proc.stderr + proc.stdout
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["schema_version"] == "1"
    return data


def error_json(proc: subprocess.CompletedProcess[str], exit_code: int) -> dict[str, Any]:
    """The error of a refused ``--json`` command, after checking its exit code."""
    assert proc.returncode == exit_code, proc.stderr + proc.stdout
    err: dict[str, Any] = json.loads(proc.stdout)["error"]
    return err


def nothing_started(root: Path) -> None:
    """No run admitted, no daemon (so no engine) started under ``root``."""
    hroot = HitchRoot(root)
    assert not hroot.runs.exists() or list(hroot.runs.iterdir()) == []
    assert not hroot.daemon_dir.exists() and not hroot.services.exists()
