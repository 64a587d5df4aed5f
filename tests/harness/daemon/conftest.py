"""Fixtures of the daemon tests: a root holding ``fixture:tiny``, the leak guard, and a daemon stopped at the end."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.app.daemon_client import stop_daemon
from harness.errors import HitchError
from harness.paths import HitchRoot
from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs
from tests.harness.service.integration_support import LeakGuard, leak_guard_for

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]
FAST = ["--idle-ttl-ms", "60000", "--monitor-interval-s", "0.2", "--stop-timeout-s", "10"]


@pytest.fixture(autouse=True)
def leak_guard(tmp_path: Path) -> Iterator[LeakGuard]:
    yield from leak_guard_for(tmp_path)


@pytest.fixture
def inputs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceInputs]:
    made = service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))
    yield made
    stop_quietly(made.root)


def stop_quietly(root: HitchRoot) -> None:
    with contextlib.suppress(HitchError):
        stop_daemon(root, timeout_s=60)


def hitch(root: HitchRoot, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HITCH, *args, "--root", str(root.path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def as_json(proc: subprocess.CompletedProcess[str], code: int = 0) -> dict[str, Any]:
    assert proc.returncode == code, proc.stderr + proc.stdout
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["schema_version"] == "1"
    return data
