"""Docker facts through the docker SDK: reachable, versions, runtimes (nvidia?), cgroups.

``docker.from_env`` honours DOCKER_HOST. An unreachable engine becomes
``reachable: false`` with a reason, never a traceback. A ``DockerApi`` factory can be
injected so tests can describe an engine without one running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from harness.devices.report import DockerFactsV1
from harness.docker_engine import DOCKER_TIMEOUT_S, docker_host, one_line, unix_socket_problem

__all__ = [
    "CONTAINER_HOST_LIMIT",
    "DockerApi",
    "host_rules_unavailable",
    "probe_docker",
]

CONTAINER_HOST_LIMIT = (
    "an internal Docker network still routes to this host's own addresses, and hitch cannot install its host "
    "firewall rules here ({why}): a host service listening on all interfaces or on a bridge address is reachable "
    "from engine and eval containers (they have no other egress; hitch's gateway listens there with run-token "
    "authentication, and probes that the engine itself is unreachable)"
)


def host_rules_unavailable() -> str | None:
    """Why hitch cannot install host firewall rules for its Docker networks (root and iptables), or None."""
    if os.geteuid() != 0:
        return "host firewall rules need root"
    if shutil.which("iptables") is None:
        return "iptables is not installed"
    return None


class DockerApi(Protocol):
    """The two read-only calls the doctor makes (docker SDK ``DockerClient`` fits)."""

    def version(self) -> Mapping[str, Any]: ...

    def info(self) -> Mapping[str, Any]: ...

    def close(self) -> None: ...


def _from_env() -> DockerApi:
    import docker

    client: DockerApi = docker.from_env(timeout=DOCKER_TIMEOUT_S)
    return client


def _str_or_none(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def probe_docker(factory: Callable[[], DockerApi] | None = None) -> DockerFactsV1:
    host = docker_host()
    problem = unix_socket_problem(host) if factory is None else None
    if problem is not None:
        return DockerFactsV1(reachable=False, reason=f"Docker not reachable at {host}: {problem}", host=host)
    try:
        client = (factory or _from_env)()
    except Exception as exc:  # the SDK raises DockerException, requests errors, OSError ...
        return DockerFactsV1(reachable=False, reason=f"Docker not reachable at {host}: {one_line(exc)}", host=host)
    try:
        version = dict(client.version())
        info = dict(client.info())
    except Exception as exc:
        return DockerFactsV1(reachable=False, reason=f"Docker not reachable at {host}: {one_line(exc)}", host=host)
    finally:
        # closing a half-open client tells us nothing new
        with contextlib.suppress(Exception):
            client.close()
    runtimes_raw = info.get("Runtimes") or {}
    runtimes = sorted(str(name) for name in runtimes_raw) if isinstance(runtimes_raw, Mapping) else []
    return DockerFactsV1(
        reachable=True,
        host=host,
        server_version=_str_or_none(version.get("Version")),
        api_version=_str_or_none(version.get("ApiVersion")),
        os_type=_str_or_none(info.get("OSType") or version.get("Os")),
        architecture=_str_or_none(info.get("Architecture") or version.get("Arch")),
        runtimes=runtimes,
        default_runtime=_str_or_none(info.get("DefaultRuntime")),
        nvidia_runtime="nvidia" in runtimes,
        cgroup_driver=_str_or_none(info.get("CgroupDriver")),
        cgroup_version=_str_or_none(info.get("CgroupVersion")),
        limits=[CONTAINER_HOST_LIMIT.format(why=why)] if (why := host_rules_unavailable()) is not None else [],
    )
