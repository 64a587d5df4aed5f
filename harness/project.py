"""This checkout's identity: the package version and the git commit it runs from (``hitch --version``, the
certification predicate's ``project_commit``)."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["PACKAGE", "REPO", "project_commit", "project_version"]

PACKAGE = "hitch-local-inference"
REPO = Path(__file__).resolve().parents[1]


def project_version() -> str:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def project_commit() -> str:
    """``git rev-parse HEAD`` of the checkout (``-dirty`` with uncommitted changes), or ``unknown`` outside one."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, timeout=10).stdout
        return out.stdout.strip() + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
