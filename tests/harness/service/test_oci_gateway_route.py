"""An OCI service serves a run through the gateway, and only hitch's own container route is accepted.

Real Docker and the fake engine image (``scripts/ci/build_fake_image.py``): the manager starts the engine
in its container on an internal network, the service record is checked against Docker
(:meth:`SupervisedService.verified_process`), the gateway binds a run to the container address and a chat
request goes client → gateway → container. Forged records — another network, an address outside the
subnet or of another container, a non-oci launcher — are refused with ``inference_route_unavailable``.
Skipped without Docker unless ``HITCH_REQUIRE_DOCKER=1``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import docker
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
from tests.harness.docker_support import docker_client_or_skip, fake_image_id
from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs
from tests.harness.service.integration_support import LeakGuard, fake_manager, leak_guard_for
from tests.harness.service.manager_fakes import run

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

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


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayThread]:
    gt = GatewayThread(GatewayConfig(state_dir=tmp_path / "gw"))
    yield gt
    gt.close()


def _small(lock: InferenceLockV1) -> InferenceLockV1:
    resources = lock.resources.model_copy(update={"memory_bytes": 512 * MiB, "shm_bytes": 64 * MiB, "cpu_cores": 1})
    return lock.model_copy(update={"resources": resources})


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
    inputs: ServiceInputs, client: docker.DockerClient, image_id: str, gateway: GatewayThread
) -> None:
    manager, _ = fake_manager(inputs.root, EngineChoice(engine="fake", launcher="oci", image=image_id))
    lock = _small(inputs.lock)

    async def body() -> None:
        lease = await manager.acquire(lock, "run-1")
        service = lease.service
        assert isinstance(service, SupervisedService)
        try:
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
        finally:
            await manager.release(lease.lease_id)
            await manager.close()

    run(body())


def test_forged_container_routes_are_refused(inputs: ServiceInputs, client: docker.DockerClient, image_id: str) -> None:
    manager, _ = fake_manager(inputs.root, EngineChoice(engine="fake", launcher="oci", image=image_id))
    lock = _small(inputs.lock)
    root = inputs.root.root
    # a network that looks like hitch's (same labels, internal) but that this epoch's service never got
    other = client.networks.create(
        f"hitch-test-forged-{root_label(root)[:8]}",
        driver="bridge",
        internal=True,
        labels={LABEL_ROOT: root_label(root), LABEL_SERVICE: "forged", LABEL_EPOCH: "1"},
    )

    async def body() -> None:
        lease = await manager.acquire(lock, "run-1")
        service = lease.service
        assert isinstance(service, SupervisedService)
        try:
            real = await service.verified_process()
            assert real is not None and real.network_subnet is not None
            sid, epoch = lease.service_id, lease.epoch
            address = service.endpoint.base_url.split("//")[1].rsplit(":", 1)[0]
            other_net = client.api.inspect_network(other.id)
            other_subnet = other_net["IPAM"]["Config"][0]["Subnet"]
            forged = {
                "another network": (real.model_copy(update={"network_id": other.id, "network_subnet": other_subnet}), address),
                "another subnet": (real.model_copy(update={"network_subnet": other_subnet}), address),
                "another address": (real, _neighbour(address)),
                "loopback alias": (real, "127.0.0.1"),
                "another epoch": (real, address, epoch + 1),
                "non-oci launcher": (real.model_copy(update={"launcher": "process"}), address),
                "another container": (real.model_copy(update={"container_id": "f" * 64}), address),
            }
            for name, case in forged.items():
                process, host = case[0], case[1]
                at_epoch = case[2] if len(case) == 3 else epoch  # type: ignore[misc]
                with pytest.raises(HitchError) as caught:
                    await asyncio.to_thread(verify_container_route, root, sid, at_epoch, process, host, client=client)
                assert caught.value.code == "inference_route_unavailable", name
            # the gateway itself refuses a container address the record does not vouch for
            for process, url in (
                (None, service.endpoint.base_url),
                (real.model_copy(update={"launcher": "process"}), service.endpoint.base_url),
                (real.model_copy(update={"network_subnet": other_subnet}), service.endpoint.base_url),
                (real, f"http://127.0.0.1:{service.endpoint.base_url.rsplit(':', 1)[1]}"),
            ):
                with pytest.raises(HitchError) as caught:
                    _target(service, lock, inputs, process, url)
                assert caught.value.code == "inference_route_unavailable"
        finally:
            await manager.release(lease.lease_id)
            await manager.close()

    try:
        run(body())
    finally:
        other.remove()


def _neighbour(address: str) -> str:
    head, last = address.rsplit(".", 1)
    return f"{head}.{int(last) % 250 + 3}"
