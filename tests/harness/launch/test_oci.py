"""The OCI launcher against a real Docker engine, running the fake SGLang engine in the image built by
``python -m fixtures.images.fake_engine``.

Skipped when no engine answers, unless ``HITCH_REQUIRE_DOCKER=1`` (CI), which turns that into a failure.
Every test gets its own HITCH_ROOT, so ownership labels tell its containers apart; after each test no
container or network with that root's label may remain.
"""

from __future__ import annotations

import asyncio
import http.server
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import psutil
import pytest

from harness.contracts.lock import ResourceVectorV1
from harness.engine.launch_spec import LaunchSpec
from harness.errors import HitchError
from harness.launch.host_guard import guard_unavailable, guarded
from harness.launch.oci import OciEngine, OciLauncher, daemon_logged_oom, list_owned_containers, remove_owned
from harness.launch.oci_config import LABEL_EPOCH, LABEL_ROOT, LABEL_SERVICE, root_label
from tests.harness.docker_support import require_or_skip

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

REPO = Path(__file__).resolve().parents[3]
ENGINE_PORT = 30000
MiB = 1024 * 1024


@pytest.fixture(scope="session")
def checkpoint(tiny_model: Path) -> Path:
    return tiny_model


@pytest.fixture
def root(tmp_path: Path, client: docker.DockerClient) -> Iterator[Path]:
    """A fresh HITCH_ROOT; afterwards nothing labelled with it may be left (cleaned, then asserted)."""
    path = tmp_path / "root"
    path.mkdir()
    yield path
    label = f"{LABEL_ROOT}={root_label(path)}"
    left_containers = client.containers.list(all=True, filters={"label": label})
    left_networks = client.networks.list(filters={"label": label})
    remove_owned(path, timeout_s=0, client=client)
    assert not left_containers, f"containers left behind: {[c.name for c in left_containers]}"
    assert not left_networks, f"networks left behind: {[n.name for n in left_networks]}"


def _spec(root: Path, image: str, checkpoint: Path, *engine_args: str, memory: int = 512 * MiB, **over: Any) -> LaunchSpec:
    argv = ["python3", "-m", "fixtures.fake_sglang", "--model-path", str(checkpoint)]
    argv += ["--host", "0.0.0.0", "--port", str(ENGINE_PORT), *engine_args]
    fields: dict[str, Any] = {
        "service_id": f"svc-{root.parent.name}",
        "epoch": 1,
        "inference_id": "sha256:" + "cd" * 32,
        "argv": argv,
        "env": {},
        "host": "0.0.0.0",
        "port": ENGINE_PORT,
        "model_dir": checkpoint,
        "log_path": root / "engine.log",
        "device": "cpu",
        "resources": ResourceVectorV1(
            cpu_cores=1, memory_bytes=memory, shm_bytes=64 * MiB, gpu_count=0, gpu_memory_bytes=0, disk_bytes=0
        ),
        "image": image,
    }
    fields.update(over)
    return LaunchSpec(**fields)


def _start(root: Path, spec: LaunchSpec, client: docker.DockerClient) -> OciEngine:
    return asyncio.run(OciLauncher(root, client=client).start(spec))


def _wait_health(engine: OciEngine, deadline_s: float = 60.0) -> int:
    """The last /health status seen (200 once ready); gives up at the deadline."""
    end = time.monotonic() + deadline_s
    status = 0
    while time.monotonic() < end:
        try:
            status = httpx.get(f"{engine.base_url}/health", timeout=2.0).status_code
            if status == 200:
                return status
        except httpx.TransportError:
            pass
        if asyncio.run(engine.poll()) is not None:
            return status
        time.sleep(0.2)
    return status


def _wait_exit(engine: OciEngine, deadline_s: float = 90.0) -> Any:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        info = asyncio.run(engine.poll())
        if info is not None:
            return info
        time.sleep(0.2)
    pytest.fail("the engine did not exit before the deadline")


def _assert_gone(client: docker.DockerClient, engine: OciEngine) -> None:
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(engine.container_id)
    with pytest.raises(docker.errors.NotFound):
        client.networks.get(engine.network_id)


def test_labels_limits_and_mounts_visible_on_container(
    root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path, tmp_path: Path
) -> None:
    key = tmp_path / "engine.key"
    key.write_text("engine-secret-value-7f3a")
    key.chmod(0o600)
    spec = _spec(root, image_id, checkpoint, secret_files={"/run/hitch/engine.key": key}, labels={"team": "t"})
    engine = _start(root, spec, client)
    attrs = client.api.inspect_container(engine.container_id)
    host = attrs["HostConfig"]
    assert host["Memory"] == 512 * MiB
    assert host["MemorySwap"] == 512 * MiB
    assert host["NanoCpus"] == 1_000_000_000
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] is True
    assert host["Init"] is True
    assert host["PortBindings"] in (None, {})
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts[str(checkpoint)]["RW"] is False
    assert mounts["/run/hitch/engine.key"]["RW"] is False
    labels = attrs["Config"]["Labels"]
    assert labels[LABEL_ROOT] == root_label(root)
    assert labels[LABEL_SERVICE] == spec.service_id
    assert labels[LABEL_EPOCH] == "1"
    assert labels["team"] == "t"
    assert "engine-secret-value-7f3a" not in repr(attrs)  # the key is a mounted file, not argv/env
    assert attrs["Image"] == image_id == engine.identity.image_id
    (net_name,) = attrs["NetworkSettings"]["Networks"]
    net = client.api.inspect_network(net_name)
    assert net["Internal"] is True
    assert net["Labels"][LABEL_ROOT] == root_label(root)
    info = asyncio.run(engine.stop(5))
    assert info.oom is False
    _assert_gone(client, engine)


def test_fake_engine_answers_health_through_base_url(
    root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path
) -> None:
    engine = _start(root, _spec(root, image_id, checkpoint), client)
    try:
        assert re.match(rf"^http://\d+\.\d+\.\d+\.\d+:{ENGINE_PORT}$", engine.base_url)
        assert _wait_health(engine) == 200
        info = httpx.get(f"{engine.base_url}/server_info", timeout=5.0).json()
        assert info["model_path"] == str(checkpoint)
        assert asyncio.run(engine.poll()) is None
    finally:
        asyncio.run(engine.stop(5))
    _assert_gone(client, engine)
    assert b"ready" in (root / "engine.log").read_bytes()  # the engine's output reached spec.log_path


_PROBE = """
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Host": sys.argv[2]})
try:
    print("REPLY", urllib.request.urlopen(req, timeout=float(sys.argv[3])).status)
except urllib.error.HTTPError as e:
    print("REPLY", e.code)
except Exception as e:
    print("NOREPLY", type(e).__name__, e)
"""


def _remote_target() -> tuple[str, str]:
    """An address beyond this host that answers HTTP (Debian's mirror: CI reaches it for apt)."""
    host = "deb.debian.org"
    try:
        ip = socket.getaddrinfo(host, 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError:
        require_or_skip(f"{host} does not resolve here, so egress cannot be contrasted")
    return f"http://{ip}/debian/", host


def test_no_egress_from_engine_container(root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path) -> None:
    url, host = _remote_target()
    probe = ["python3", "-c", _PROBE, url, host, "5"]
    # Control: the same image on a normal bridge network gets a real reply from beyond the host.
    control = client.containers.run(
        image_id, probe, entrypoint=[], labels={LABEL_ROOT: root_label(root)}, detach=True, user="65534:65534"
    )
    try:
        control.wait(timeout=60)
        control_out = control.logs().decode()
    finally:
        control.remove(force=True)
    if not control_out.startswith("REPLY"):
        require_or_skip(f"no reply from {host} even on a normal bridge network: {control_out.strip()}")
    engine = _start(root, _spec(root, image_id, checkpoint), client)
    try:
        exec_id = client.api.exec_create(engine.container_id, probe)["Id"]
        engine_out = client.api.exec_start(exec_id).decode()
    finally:
        asyncio.run(engine.stop(5))
    assert engine_out.startswith("NOREPLY"), engine_out


def _host_address(client: docker.DockerClient) -> str:
    """An address of this host that containers route to: the default bridge's own. Most engines list it as the
    bridge's IPAM gateway; Debian's docker.io 20.10 lists only the subnet, so it is read from the interface."""
    attrs = client.api.inspect_network("bridge")
    listed = [str(c["Gateway"]) for c in attrs["IPAM"]["Config"] or [] if c.get("Gateway")]
    if listed:
        return listed[0]
    interface = attrs["Options"]["com.docker.network.bridge.name"]
    return str(next(a.address for a in psutil.net_if_addrs()[interface] if a.family == socket.AF_INET))


def test_engine_container_cannot_reach_host_services(
    root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path
) -> None:
    """An internal network still routes to the host's own addresses; hitch's host rules on the engine's bridge
    (root + iptables) close that. Without them it is the doctor's stated limit, and this test skips."""
    why = guard_unavailable()
    if why is not None:
        pytest.skip(f"host firewall rules unavailable ({why}): the doctor states this limit")
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    engine = _start(root, _spec(root, image_id, checkpoint), client)
    try:
        gateway = _host_address(client)
        url = f"http://{gateway}:{server.server_address[1]}/"
        exec_id = client.api.exec_create(engine.container_id, ["python3", "-c", _PROBE, url, gateway, "3"])["Id"]
        out = client.api.exec_start(exec_id).decode()
        bridge = f"br-{engine.network_id[:12]}"
        assert guarded(bridge)
        health = _wait_health(engine)  # the host still reaches the engine
    finally:
        asyncio.run(engine.stop(5))
        server.shutdown()
        server.server_close()
    assert out.startswith("NOREPLY"), out
    assert health == 200
    assert not guarded(bridge)  # the rules went with the network


def test_real_oom_reported_as_oom(root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path) -> None:
    spec = _spec(root, image_id, checkpoint, "--fault", "memory_growth:mb_per_s=256", memory=256 * MiB)
    engine = _start(root, spec, client)
    try:
        info = _wait_exit(engine)
        started = client.api.inspect_container(engine.container_id)["State"]["StartedAt"]
        # the second source poll trusts when the State flag lost a race: the daemon's own oom event
        assert daemon_logged_oom(client, engine.container_id, started) is True
    finally:
        final = asyncio.run(engine.stop(5))
    assert info.oom is True
    assert info.exit_code == 137
    assert final == info
    _assert_gone(client, engine)


def test_plain_exit_is_not_oom(root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path) -> None:
    engine = _start(root, _spec(root, image_id, checkpoint, "--fault", "exit_after_seconds:t=0.5,code=3"), client)
    try:
        info = _wait_exit(engine)
    finally:
        asyncio.run(engine.stop(5))
    assert (info.exit_code, info.oom) == (3, False)
    _assert_gone(client, engine)


def test_plain_kill_is_137_but_not_oom(root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path) -> None:
    engine = _start(root, _spec(root, image_id, checkpoint), client)
    try:
        client.api.kill(engine.container_id, signal="SIGKILL")
        info = _wait_exit(engine)
        started = client.api.inspect_container(engine.container_id)["State"]["StartedAt"]
        assert daemon_logged_oom(client, engine.container_id, started) is False
    finally:
        asyncio.run(engine.stop(5))
    assert (info.exit_code, info.oom) == (137, False)


def test_hanging_engine_is_stopped_and_removed(root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path) -> None:
    engine = _start(root, _spec(root, image_id, checkpoint, "--fault", "startup_hang"), client)
    assert _wait_health(engine, deadline_s=3.0) != 200
    info = asyncio.run(engine.stop(5))
    assert info.oom is False
    assert info.exit_code is not None
    _assert_gone(client, engine)
    assert asyncio.run(engine.stop(5)) == info  # idempotent


def test_missing_image_leaves_nothing(root: Path, client: docker.DockerClient, checkpoint: Path) -> None:
    with pytest.raises(HitchError) as err:
        _start(root, _spec(root, "sha256:" + "0" * 64, checkpoint), client)
    assert err.value.code == "inference_runtime_unavailable"


def test_list_and_remove_owned_touch_only_this_root(
    root: Path, client: docker.DockerClient, image_id: str, checkpoint: Path, tmp_path: Path
) -> None:
    other_root = tmp_path / "other-root"
    engine = _start(root, _spec(root, image_id, checkpoint), client)
    owned = list_owned_containers(root, client=client)
    assert [(c.container_id, c.service_id, c.epoch) for c in owned] == [(engine.container_id, f"svc-{tmp_path.name}", 1)]
    assert list_owned_containers(other_root, client=client) == []
    assert remove_owned(other_root, client=client) == []
    assert client.containers.get(engine.container_id).status == "running"
    assert remove_owned(root, timeout_s=5, client=client) == [engine.container_id]
    _assert_gone(client, engine)
    assert asyncio.run(engine.poll()) is not None
