"""The harness tests' names for the shared Docker fixtures of ``tests/conftest.py``."""

from __future__ import annotations

import docker
import pytest


@pytest.fixture(scope="session")
def client(docker_api: docker.DockerClient) -> docker.DockerClient:
    return docker_api


@pytest.fixture(scope="session")
def image_id(fake_image: str) -> str:
    return fake_image
