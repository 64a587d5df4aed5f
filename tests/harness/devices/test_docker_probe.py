"""Docker probe: an unreachable engine is a reason, a described engine is facts."""

from __future__ import annotations

import pytest

from harness.devices import docker_probe
from harness.devices.docker_probe import CONTAINER_HOST_LIMIT, DockerApi, host_rules_unavailable, probe_docker
from tests.harness.devices.fakes import FakeDocker


def test_unreachable_docker_host_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    docker = probe_docker()
    assert not docker.reachable
    assert docker.host == "unix:///nonexistent.sock"
    assert docker.reason is not None and "nonexistent.sock" in docker.reason
    assert docker.runtimes == []
    assert not docker.nvidia_runtime


def test_client_failing_mid_call_is_a_reason_and_closes() -> None:
    class Broken(FakeDocker):
        def info(self) -> dict[str, object]:
            raise ConnectionError("engine went away")

    client = Broken()

    def factory() -> DockerApi:
        return client

    docker = probe_docker(factory)
    assert not docker.reachable
    assert docker.reason is not None and "engine went away" in docker.reason
    assert client.closed


def test_reachable_engine_facts() -> None:
    client = FakeDocker()
    docker = probe_docker(lambda: client)
    assert docker.reachable
    assert docker.reason is None
    assert docker.server_version == "28.3.0"
    assert docker.api_version == "1.51"
    assert docker.runtimes == ["io.containerd.runc.v2", "nvidia", "runc"]
    assert docker.nvidia_runtime
    assert docker.cgroup_driver == "systemd"
    assert docker.cgroup_version == "2"
    assert (docker.os_type, docker.architecture) == ("linux", "x86_64")
    # what container isolation does not close is stated: here (root with iptables) hitch closes it itself
    why = host_rules_unavailable()
    assert docker.limits == ([] if why is None else [CONTAINER_HOST_LIMIT.format(why=why)])
    assert client.closed


def test_engine_without_nvidia_runtime() -> None:
    docker = probe_docker(lambda: FakeDocker(runtimes=("runc",)))
    assert docker.reachable
    assert not docker.nvidia_runtime


def test_without_host_rules_the_gap_is_a_stated_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_probe.shutil, "which", lambda _name: None)
    monkeypatch.setattr(docker_probe.os, "geteuid", lambda: 0)
    facts = probe_docker(FakeDocker)
    assert facts.limits == [CONTAINER_HOST_LIMIT.format(why="iptables is not installed")]
    assert "reachable from engine and eval containers" in facts.limits[0]
