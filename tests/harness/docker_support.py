"""Shared by the tests that need a real Docker engine: the client (skip, or fail under
HITCH_REQUIRE_DOCKER=1), the fake-engine image and the eval trial image, each built by its idempotent builder
(:mod:`fixtures.images`)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import docker
import pytest

from fixtures.images import built_image
from harness.docker_engine import docker_client
from harness.errors import HitchError
from tests.components import missing


def require_or_skip(reason: str) -> NoReturn:
    missing("docker", reason)


def docker_client_or_skip() -> docker.DockerClient:
    try:
        return docker_client()
    except HitchError as exc:
        require_or_skip(exc.message)
        raise  # unreachable: require_or_skip always raises


def fake_image_id(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fake engine image's ID (the builder is idempotent; serialised across xdist workers)."""
    return _built_image("fake_engine", tmp_path_factory)


def trial_image_id(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The eval trial image's ID (the fake engine image plus ``fixtures/eval_trial``; idempotent)."""
    return _built_image("trial", tmp_path_factory)


def _built_image(name: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    # one mutex for both builders: the trial image's build runs the fake image's
    try:
        return built_image(name, Path(tmp_path_factory.getbasetemp()).parent / "hitch-fake-image.lock")
    except HitchError as exc:
        pytest.fail(exc.message, pytrace=False)
