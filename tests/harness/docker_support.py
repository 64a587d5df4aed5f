"""Shared by the tests that need a real Docker engine: the client (skip, or fail under
HITCH_REQUIRE_DOCKER=1), the fake-engine image and the eval trial image, each built by its idempotent script."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import docker
import pytest
from filelock import FileLock

from harness.docker_engine import docker_client
from harness.errors import HitchError
from tests.components import missing

REPO = Path(__file__).resolve().parents[2]


def require_or_skip(reason: str) -> NoReturn:
    missing("docker", reason)


def docker_client_or_skip() -> docker.DockerClient:
    try:
        return docker_client()
    except HitchError as exc:
        require_or_skip(exc.message)
        raise  # unreachable: require_or_skip always raises


def fake_image_id(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fake engine image's ID (the build script is idempotent; serialised across xdist workers)."""
    return _built_image("build_fake_image.py", tmp_path_factory)


def trial_image_id(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The eval trial image's ID (the fake engine image plus ``fixtures/eval_trial``; idempotent)."""
    return _built_image("build_trial_image.py", tmp_path_factory)


def _built_image(script: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    # one lock for both scripts: the trial image's build runs the fake image's
    lock = Path(tmp_path_factory.getbasetemp()).parent / "hitch-fake-image.lock"
    with FileLock(str(lock)):
        out = subprocess.run([sys.executable, str(REPO / "scripts/ci" / script)], capture_output=True, text=True, check=False)
    match = re.search(r"^IMAGE_ID=(sha256:[0-9a-f]{64})$", out.stdout, re.M)
    if out.returncode != 0 or not match:
        pytest.fail(f"{script} failed:\n{out.stdout}\n{out.stderr}", pytrace=False)
    return match.group(1)
