"""Fixtures every test package shares: one tiny checkpoint per test session (built once, byte-stable); a fake
engine per test module and a fresh gateway per test; the real Docker engine's client and the fake engine image
for the tests that need them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest
from hypothesis import HealthCheck, settings

from fixtures.checkpoint import tiny_checkpoint_cached
from fixtures.fake_sglang.client import FakeEngineProcess, start_fake_engine

if TYPE_CHECKING:
    from gateway.server import GatewayConfig
    from gateway.testing import GatewayThread

# No test may depend on timing: Hypothesis's per-example deadline (200 ms) and its too-slow health check fail
# a property test when the shared machine is busy, never because the property broke.
settings.register_profile("hitch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hitch")

# The certifications these tests run share the machine with the other tests (pytest -n): their quiet phases are
# taken and read but do not refuse a timing for that load (rows say "unguarded"); tests/certify/test_quiet.py
# loads the machine on purpose and asserts the refusal.
os.environ.setdefault("HITCH_CERTIFY_QUIET_LOAD", "off")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama checkpoint (``fixture:tiny``); under xdist each worker shares one cache."""
    return tiny_checkpoint_cached(tmp_path_factory.getbasetemp().parent / "tiny-ckpt")


@pytest.fixture
def engine(shared_engine: FakeEngineProcess) -> FakeEngineProcess:
    """The module's fake engine, alive, with no fault armed and an empty request log."""
    if not shared_engine.alive():
        pytest.fail("the shared fake engine died in an earlier test")
    shared_engine.reset()
    return shared_engine


@pytest.fixture(scope="module")
def shared_engine(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeEngineProcess]:
    """One fake engine process per test module (``tiny-wire``, a random API key); tests take it as ``engine``."""
    with start_fake_engine(tiny_model, tmp_path_factory.mktemp("engine")) as engine:
        yield engine


@pytest.fixture
def gateway(gateway_config: GatewayConfig) -> Iterator[GatewayThread]:
    """A fresh real gateway per test, on its own loop thread, closed at teardown."""
    from gateway.testing import GatewayThread

    with GatewayThread(gateway_config) as gt:
        yield gt


@pytest.fixture
def gateway_config(tmp_path: Path) -> GatewayConfig:
    """The settings of the test's ``gateway`` (a module overrides this fixture for other limits)."""
    from gateway.server import GatewayConfig

    return GatewayConfig(state_dir=tmp_path / "gw")


@pytest.fixture(scope="session")
def docker_api() -> Iterator[docker.DockerClient]:
    """A client of the real Docker engine (skip, or fail under HITCH_REQUIRE_DOCKER=1, when there is none)."""
    from tests.harness.docker_support import docker_client_or_skip

    c = docker_client_or_skip()
    yield c
    c.close()


@pytest.fixture(scope="session")
def fake_image(docker_api: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fake engine image's ID (built once per session; the build script is idempotent and serialised)."""
    from tests.harness.docker_support import fake_image_id

    return fake_image_id(tmp_path_factory)


@pytest.fixture(scope="session")
def trial_image(docker_api: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The eval trial image's ID (the fake engine image plus ``fixtures/eval_trial``; idempotent)."""
    from tests.harness.docker_support import trial_image_id

    return trial_image_id(tmp_path_factory)
