"""hitch's eval network against a real Docker engine: the gateway's bridge listener is reachable from a
container on it, a loopback-only one is not (``local_inference_topology_unsupported``), a host service that
listens where containers look is seen by the probe (so the probe can fail), a loopback engine is not, and a
same-named network hitch did not make is refused, and with hitch's host rules on the bridge only the gateway's
listener answers there. Every network, probe container and host rule is removed."""

from __future__ import annotations

import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from gateway.bindings import run_path_prefix
from gateway.server import GatewayConfig
from gateway.testing import GatewayThread
from harness.errors import HitchError
from harness.launch.eval_network import (
    LABEL_ROLE,
    EvalNetwork,
    ensure_eval_network,
    eval_network_name,
    probe_network,
    remove_eval_network,
    require_engine_unreachable,
    require_gateway_reachable,
)
from harness.launch.host_guard import chain_for, guard_bridge, guard_unavailable, guarded
from harness.launch.oci_config import LABEL_ROOT, root_label
from tests.harness.docker_support import require_or_skip

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]


@pytest.fixture
def root(tmp_path: Path, client: docker.DockerClient) -> Iterator[Path]:
    root = tmp_path / "root"
    root.mkdir()
    yield root
    remove_eval_network(root, client=client)
    label = f"{LABEL_ROOT}={root_label(root)}"
    assert client.api.containers(all=True, filters={"label": label}) == []
    assert client.api.networks(filters={"label": label}) == []


@pytest.fixture
def network(root: Path, client: docker.DockerClient) -> EvalNetwork:
    return ensure_eval_network(root, client=client)


@pytest.fixture
def gateway_config(tmp_path: Path) -> GatewayConfig:
    return GatewayConfig(state_dir=tmp_path / "gw", metrics_port=None)


def _probe_url(origin: str) -> str:
    return f"{origin}{run_path_prefix('bprobe')}/models"


def test_network_is_internal_labelled_and_adopted(root: Path, client: docker.DockerClient, network: EvalNetwork) -> None:
    attrs = client.api.inspect_network(network.network_id)
    assert attrs["Internal"] is True and attrs["Driver"] == "bridge" and attrs["Name"] == eval_network_name(root)
    assert attrs["Labels"][LABEL_ROOT] == root_label(root) and attrs["Labels"][LABEL_ROLE] == "eval-network"
    assert ensure_eval_network(root, client=client) == network  # a second daemon adopts it
    assert remove_eval_network(root, client=client) is True
    assert client.api.networks(names=[network.name]) == []


def test_gateway_on_the_bridge_is_reached_and_loopback_is_not(
    root: Path, client: docker.DockerClient, trial_image: str, network: EvalNetwork, gateway: GatewayThread
) -> None:
    origin = gateway.run(gateway.gw.listen_on(network.gateway_ip))
    assert origin.startswith(f"http://{network.gateway_ip}:")
    seen = probe_network(root, network, trial_image, _probe_url(origin), client=client)
    assert (seen.gateway_status, seen.gateway_code) == (401, "inference_token_invalid")
    require_gateway_reachable(seen, network)
    # the loopback listener of the same gateway, addressed from the container, is nothing it can reach
    loopback = f"http://{network.gateway_ip}:{gateway.gw.port}"
    missed = probe_network(root, network, trial_image, _probe_url(loopback), client=client)
    assert not missed.gateway_reached and missed.gateway_error
    with pytest.raises(HitchError) as err:
        require_gateway_reachable(missed, network)
    assert err.value.code == "local_inference_topology_unsupported"
    # this root's probes only: another test's probe may be running beside this one
    mine = [f"{LABEL_ROLE}=eval-probe", f"{LABEL_ROOT}={root_label(root)}"]
    assert client.api.containers(all=True, filters={"label": mine}) == []


def test_probe_sees_a_host_service_on_the_bridge_and_not_a_loopback_one(
    root: Path, client: docker.DockerClient, trial_image: str, network: EvalNetwork, gateway: GatewayThread
) -> None:
    exposed = http.server.ThreadingHTTPServer((network.gateway_ip, 0), http.server.SimpleHTTPRequestHandler)
    hidden = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (exposed, hidden)]
    for t in threads:
        t.start()
    try:
        origin = gateway.run(gateway.gw.listen_on(network.gateway_ip))
        targets = [f"{network.gateway_ip}:{exposed.server_address[1]}", f"{network.gateway_ip}:{hidden.server_address[1]}"]
        seen = probe_network(root, network, trial_image, _probe_url(origin), targets, client=client)
    finally:
        for s in (exposed, hidden):
            s.shutdown()
            s.server_close()
    assert seen.engine_reached == [targets[0]]
    with pytest.raises(HitchError) as err:
        require_engine_unreachable(seen, network)
    assert err.value.code == "local_inference_topology_unsupported" and err.value.details["reached"] == [targets[0]]


def test_a_same_named_network_hitch_did_not_make_is_refused(root: Path, client: docker.DockerClient) -> None:
    foreign = client.networks.create(eval_network_name(root), driver="bridge")
    try:
        with pytest.raises(HitchError) as err:
            ensure_eval_network(root, client=client)
        assert err.value.code == "local_inference_topology_unsupported"
    finally:
        foreign.remove()


def test_host_guard_leaves_only_the_gateway_listener_reachable(
    root: Path, client: docker.DockerClient, trial_image: str, network: EvalNetwork, gateway: GatewayThread
) -> None:
    if guard_unavailable() is not None:
        require_or_skip(f"host firewall rules: {guard_unavailable()}")
    exposed = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=exposed.serve_forever, daemon=True)
    thread.start()
    try:
        origin = gateway.run(gateway.gw.listen_on(network.gateway_ip))
        allow = [(network.gateway_ip, int(origin.rsplit(":", 1)[1]))]
        guard_bridge(network.bridge, allow)
        guard_bridge(network.bridge, allow)  # a later daemon rewrites the chain: still one jump, same rules
        assert guarded(network.bridge)
        rules = subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True, text=True, check=True).stdout
        assert rules.count(f"-j {chain_for(network.bridge)}") == 1
        target = [f"{network.gateway_ip}:{exposed.server_address[1]}"]
        seen = probe_network(root, network, trial_image, _probe_url(origin), target, client=client)
        assert seen.gateway_reached and seen.engine_reached == []  # the host service on all interfaces is not
        assert remove_eval_network(root, client=client) is True
        assert not guarded(network.bridge)
        listed = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, check=True).stdout
        assert chain_for(network.bridge) not in listed
    finally:
        exposed.shutdown()
        exposed.server_close()
