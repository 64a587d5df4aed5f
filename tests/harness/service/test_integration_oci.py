"""The manager + supervisor driving the OCI launcher against a real Docker engine (fake engine image).

An OCI service serves a run through the gateway: the service record is checked against Docker
(:meth:`SupervisedService.verified_process`), the gateway binds a run to the container address and a chat
request goes client → gateway → container; forged records (another network, subnet, address, epoch or
container, a loopback alias, a non-oci launcher) are refused with ``inference_route_unavailable``.

Skipped when no Docker engine answers, unless ``HITCH_REQUIRE_DOCKER=1`` (then a failure). The image is
built by ``python -m fixtures.images.fake_engine`` (idempotent). After each test no container of the test's root
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

from gateway.bindings import UpstreamTarget
from gateway.server import GatewayConfig
from gateway.testing import GatewayThread
from harness.contracts.lock import InferenceLockV1
from harness.contracts.service import ProcessIdentityV1
from harness.errors import HitchError
from harness.launch.oci import verify_container_route
from harness.launch.oci_config import LABEL_EPOCH, LABEL_ROOT, LABEL_SERVICE, root_label
from harness.service.starter_supervisor import EngineChoice, SupervisedService
from harness.service.state_store import ServiceStateStore
from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs
from tests.harness.service.integration_support import LeakGuard, fake_manager, leak_guard_for, supervised_lease
from tests.harness.service.manager_fakes import run

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

REPO = Path(__file__).resolve().parents[3]
MiB = 1024 * 1024


@pytest.fixture
def inputs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> ServiceInputs:
    return service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))


@pytest.fixture(autouse=True)
def leak_guard(tmp_path: Path, client: docker.DockerClient, inputs: ServiceInputs) -> Iterator[LeakGuard]:
    for guard in leak_guard_for(tmp_path):
        guard.docker = client
        guard.watch_root(inputs.root.path)
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
        for _ in range(1200):
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
        for _ in range(1200):
            if _gone(client, sup.engine.identity.container_id):
                break
            await asyncio.sleep(0.1)
        assert _gone(client, sup.engine.identity.container_id)
        await manager.close()
        return code

    assert run(body()) == "inference_oom"


def _target(service: SupervisedService, lock: InferenceLockV1, inputs: ServiceInputs, process: ProcessIdentityV1 | None,
            base_url: str | None = None) -> UpstreamTarget:  # fmt: skip
    endpoint = service.endpoint
    return UpstreamTarget(
        base_url=base_url or endpoint.base_url,
        engine_key=endpoint.keys.api_key,
        service_id=endpoint.service_id,
        inference_id=endpoint.inference_id,
        epoch=endpoint.epoch,
        lock=lock,
        wire_model=endpoint.wire_model,
        tokenizer_dir=inputs.model_dir,
        process=process,
    )


def test_an_oci_service_serves_a_chat_request_through_the_gateway(
    inputs: ServiceInputs, client: docker.DockerClient, image_id: str, tmp_path: Path
) -> None:
    manager, _ = fake_manager(inputs.root, _choice(image_id))
    lock = _small(inputs.lock, 512 * MiB)

    async def body(gateway: GatewayThread) -> None:
        async with supervised_lease(manager, lock) as (lease, service):
            process = await service.verified_process()
            assert process is not None and process.launcher == "oci" and process.network_subnet
            net = client.api.inspect_network(process.network_id)
            assert net["Internal"] is True and net["Labels"][LABEL_SERVICE] == lease.service_id
            record = await asyncio.to_thread(gateway.register, "run-1", _target(service, lock, inputs, process))
            token = gateway.token_of(record)
            async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
                reply = await http.post(
                    record.base_url + "/chat/completions",
                    json={"model": record.wire_model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
                    headers={"Authorization": f"Bearer {token}"},
                )
            assert reply.status_code == 200, reply.text
            answer = reply.json()
            assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["role"] == "assistant"
            assert answer["usage"]["completion_tokens"] >= 1

    with GatewayThread(GatewayConfig(state_dir=tmp_path / "gw")) as gateway:
        run(body(gateway))


def test_forged_container_routes_are_refused(inputs: ServiceInputs, client: docker.DockerClient, image_id: str) -> None:
    manager, _ = fake_manager(inputs.root, _choice(image_id))
    lock = _small(inputs.lock, 512 * MiB)
    root = inputs.root.path
    # a network that looks like hitch's (same labels, internal) but that this epoch's service never got
    other = client.networks.create(
        f"hitch-test-forged-{root_label(root)[:8]}",
        driver="bridge",
        internal=True,
        labels={LABEL_ROOT: root_label(root), LABEL_SERVICE: "forged", LABEL_EPOCH: "1"},
    )

    async def body() -> None:
        async with supervised_lease(manager, lock) as (lease, service):
            real = await service.verified_process()
            assert real is not None and real.network_subnet is not None
            sid, epoch = lease.service_id, lease.epoch
            address = service.endpoint.base_url.split("//")[1].rsplit(":", 1)[0]
            other_net = client.api.inspect_network(other.id)
            other_subnet = other_net["IPAM"]["Config"][0]["Subnet"]
            forged: dict[str, tuple[ProcessIdentityV1, str, int]] = {
                "another network": (
                    real.model_copy(update={"network_id": other.id, "network_subnet": other_subnet}),
                    address,
                    epoch,
                ),
                "another subnet": (real.model_copy(update={"network_subnet": other_subnet}), address, epoch),
                "another address": (real, _neighbour(address), epoch),
                "loopback alias": (real, "127.0.0.1", epoch),
                "another epoch": (real, address, epoch + 1),
                "non-oci launcher": (real.model_copy(update={"launcher": "process"}), address, epoch),
                "another container": (real.model_copy(update={"container_id": "f" * 64}), address, epoch),
            }
            for name, (process, host, at_epoch) in forged.items():
                with pytest.raises(HitchError) as caught:
                    await asyncio.to_thread(verify_container_route, root, sid, at_epoch, process, host, client=client)
                assert caught.value.code == "inference_route_unavailable", name
            # the gateway itself refuses a container address the record does not vouch for
            refused: tuple[tuple[ProcessIdentityV1 | None, str], ...] = (
                (None, service.endpoint.base_url),
                (real.model_copy(update={"launcher": "process"}), service.endpoint.base_url),
                (real.model_copy(update={"network_subnet": other_subnet}), service.endpoint.base_url),
                (real, f"http://127.0.0.1:{service.endpoint.base_url.rsplit(':', 1)[1]}"),
            )
            for record, url in refused:
                with pytest.raises(HitchError) as caught:
                    _target(service, lock, inputs, record, url)
                assert caught.value.code == "inference_route_unavailable"

    try:
        run(body())
    finally:
        other.remove()


def _neighbour(address: str) -> str:
    head, last = address.rsplit(".", 1)
    return f"{head}.{int(last) % 250 + 3}"
