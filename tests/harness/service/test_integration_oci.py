"""The manager + supervisor driving the OCI launcher against a real Docker engine (fake engine image).

Skipped when no Docker engine answers, unless ``HITCH_REQUIRE_DOCKER=1`` (then a failure). The image is
built by ``scripts/ci/build_fake_image.py`` (idempotent). After each test no container of the test's root
may be left (leak guard).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import httpx
import pytest

from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.service.starter_supervisor import EngineChoice, SupervisedService
from harness.service.state_store import ServiceStateStore
from tests.harness.docker_support import docker_client_or_skip, fake_image_id
from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs
from tests.harness.service.integration_support import LeakGuard, fake_manager, leak_guard_for
from tests.harness.service.manager_fakes import run

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

REPO = Path(__file__).resolve().parents[3]
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    c = docker_client_or_skip()
    yield c
    c.close()


@pytest.fixture(scope="module")
def image_id(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str:
    return fake_image_id(tmp_path_factory)


@pytest.fixture
def inputs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> ServiceInputs:
    return service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))


@pytest.fixture(autouse=True)
def leak_guard(tmp_path: Path, client: docker.DockerClient, inputs: ServiceInputs) -> Iterator[LeakGuard]:
    for guard in leak_guard_for(tmp_path):
        guard.docker = client
        guard.watch_root(inputs.root.root)
        yield guard


def _small(lock: InferenceLockV1, memory: int) -> InferenceLockV1:
    resources = lock.resources.model_copy(update={"memory_bytes": memory, "shm_bytes": 64 * MiB, "cpu_cores": 1})
    return lock.model_copy(update={"resources": resources})


def _choice(image: str, *flags: str) -> EngineChoice:
    return EngineChoice(engine="fake", launcher="oci", image=image, fake_flags=tuple(flags))


def _gone(client: docker.DockerClient, container_id: str) -> bool:
    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


async def _wait_failed(inputs: ServiceInputs, service_id: str) -> str | None:
    for _ in range(600):
        record = ServiceStateStore(inputs.root, service_id).read()
        released = [e for e in ServiceStateStore(inputs.root, service_id).events() if e.event == "inference.stopped"]
        if record is not None and record.state == "failed" and released:
            return record.error_code
        await asyncio.sleep(0.1)
    return None


def test_oci_ready_acquire_release_ttl_stop(inputs: ServiceInputs, client: docker.DockerClient, image_id: str) -> None:
    manager, _ = fake_manager(inputs.root, _choice(image_id), idle_ttl_ms=200)

    async def body() -> None:
        lease = await manager.acquire(_small(inputs.lock, 512 * MiB), "run-1")
        service = lease.service
        assert isinstance(service, SupervisedService)
        container_id = service.supervisor.engine.identity.container_id if service.supervisor.engine else None
        assert container_id is not None
        labels = client.api.inspect_container(container_id)["Config"]["Labels"]
        assert labels["dev.hitch.service"] == lease.service_id and labels["dev.hitch.epoch"] == str(lease.epoch)
        async with httpx.AsyncClient(base_url=service.base_url) as http:
            models = await http.get("/v1/models", headers={"Authorization": f"Bearer {service.endpoint.keys.api_key}"})
        assert models.status_code == 200
        await manager.release(lease.lease_id)
        for _ in range(300):
            if not manager.services() and _gone(client, container_id):
                break
            await asyncio.sleep(0.1)
        assert _gone(client, container_id)

    run(body())


def test_oci_engine_exit_is_process_exited_and_the_container_is_removed(
    inputs: ServiceInputs, client: docker.DockerClient, image_id: str
) -> None:
    # readiness sends 4 counted requests; the 5th (ours) makes the engine exit with code 3
    manager, _ = fake_manager(inputs.root, _choice(image_id, "--fault", "exit_after_requests:n=5,code=3"))

    async def body() -> None:
        lease = await manager.acquire(_small(inputs.lock, 512 * MiB), "run-1")
        service = lease.service
        assert isinstance(service, SupervisedService)
        engine = service.supervisor.engine
        assert engine is not None and engine.identity.container_id is not None
        async with httpx.AsyncClient(base_url=service.base_url) as http:
            await http.get("/v1/models", headers={"Authorization": f"Bearer {service.endpoint.keys.api_key}"})
        assert await _wait_failed(inputs, lease.service_id) == "inference_process_exited"
        assert not manager.is_valid(lease.lease_id)
        assert _gone(client, engine.identity.container_id)
        await manager.close()

    run(body())


def test_oci_startup_hang_is_start_timeout_and_the_container_is_gone(
    inputs: ServiceInputs, client: docker.DockerClient, image_id: str
) -> None:
    manager, starter = fake_manager(inputs.root, _choice(image_id, "--fault", "startup_hang"), startup_timeout_s=5.0)

    async def body() -> None:
        with pytest.raises(HitchError) as caught:
            await manager.acquire(_small(inputs.lock, 512 * MiB), "run-1")
        assert caught.value.code == "inference_start_timeout"
        (sup,) = starter.supervisors.values()
        assert sup.engine is not None and sup.engine.identity.container_id is not None
        assert _gone(client, sup.engine.identity.container_id)
        assert manager.services() == []

    run(body())


def test_oci_real_oom_through_the_manager_is_inference_oom(
    inputs: ServiceInputs, client: docker.DockerClient, image_id: str
) -> None:
    manager, starter = fake_manager(inputs.root, _choice(image_id, "--fault", "memory_growth:mb_per_s=256"))

    async def body() -> str | None:
        lock = _small(inputs.lock, 256 * MiB)
        try:
            lease = await manager.acquire(lock, "run-1")
        except HitchError as err:  # killed while still starting
            code: str | None = err.code
        else:  # killed after it became ready: the monitor reports it
            code = await _wait_failed(inputs, lease.service_id)
        (sup,) = starter.supervisors.values()
        assert sup.engine is not None and sup.engine.identity.container_id is not None
        for _ in range(100):
            if _gone(client, sup.engine.identity.container_id):
                break
            await asyncio.sleep(0.1)
        assert _gone(client, sup.engine.identity.container_id)
        await manager.close()
        return code

    assert run(body()) == "inference_oom"
