"""The network eval containers use to reach the gateway, and the probe that proves what they reach (spec §11.1).

One labelled ``internal=True`` bridge network per HITCH_ROOT (``hitch-<root8>-eval``): no egress, no DNS, and
the host reachable only at the bridge's gateway address, where the daemon's gateway opens a second listener
for container-facing run bindings. :func:`ensure_eval_network` creates it (or adopts the one this root
already made), :func:`remove_eval_network` removes it (and its host firewall rules,
:mod:`harness.launch.host_guard`) once no container is attached.

:func:`probe_network` runs a throwaway container on that network (the eval image itself, so the probe proves
what that image sees) and reports whether the gateway answers as hitch's gateway (a 401 with
``inference_token_invalid`` for a binding that does not exist) and whether any engine address accepts a TCP
connection — a connect alone counts as reached, the stricter reading. :func:`require_gateway_reachable` and
:func:`require_engine_unreachable` turn a probe into ``local_inference_topology_unsupported`` (custom
network, rootless or remote Docker: the gateway is not where the containers look for it).

Sync docker SDK calls: call them via ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from harness.docker_engine import docker_client, translate_docker_errors
from harness.engine.launch_spec import OWNER_LABEL_PREFIX
from harness.errors import HitchError
from harness.launch.host_guard import unguard_bridge
from harness.launch.oci_config import LABEL_ROOT, require_pinned_image, root_label

__all__ = [
    "LABEL_ROLE",
    "EvalNetwork",
    "ProbeResult",
    "ensure_eval_network",
    "eval_network_name",
    "probe_network",
    "remove_eval_network",
    "require_engine_unreachable",
    "require_gateway_reachable",
]

LABEL_ROLE = f"{OWNER_LABEL_PREFIX}.role"
_ROLE_NETWORK = "eval-network"
_ROLE_PROBE = "eval-probe"
_PROBE_TIMEOUT_S = 3.0
_PROBE_WAIT_S = 120

# Runs inside the probe container with the image's python3 (stdlib only). argv: timeout, gateway URL, then
# engine host:port targets. One JSON line on stdout.
_PROBE = r"""
import json, socket, sys, urllib.error, urllib.request
timeout, gateway, targets = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
out = {"gateway": {}, "engine": []}
req = urllib.request.Request(gateway, headers={"Authorization": "Bearer not-a-token"})
try:
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out["gateway"] = {"status": r.status, "body": r.read(2000).decode("utf-8", "replace")}
except urllib.error.HTTPError as e:
    out["gateway"] = {"status": e.code, "body": e.read(2000).decode("utf-8", "replace")}
except Exception as e:
    out["gateway"] = {"error": type(e).__name__ + ": " + str(e)[:200]}
for t in targets:
    host, _, port = t.rpartition(":")
    row = {"target": t, "connected": False}
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            row["connected"] = True
    except Exception as e:
        row["error"] = type(e).__name__ + ": " + str(e)[:200]
    out["engine"].append(row)
print(json.dumps(out), flush=True)
"""


@dataclass(frozen=True)
class EvalNetwork:
    """The eval network as Docker reports it: ``gateway_ip`` is the host's address on its bridge."""

    network_id: str
    name: str
    subnet: str
    gateway_ip: str

    @property
    def bridge(self) -> str:
        """The host interface of the network (Docker's ``br-<id[:12]>``)."""
        return f"br-{self.network_id[:12]}"


@dataclass(frozen=True)
class ProbeResult:
    """What a container on the eval network saw."""

    gateway_status: int | None
    gateway_code: str | None
    gateway_error: str | None
    engine: list[dict[str, Any]] = field(default_factory=list)
    raw: str = ""

    @property
    def gateway_reached(self) -> bool:
        return self.gateway_status == 401 and self.gateway_code == "inference_token_invalid"

    @property
    def engine_reached(self) -> list[str]:
        return [str(row.get("target")) for row in self.engine if row.get("connected")]

    def to_json(self) -> dict[str, Any]:
        """The probe's findings, without ``raw`` (its unparsed output)."""
        fields = asdict(self)
        del fields["raw"]
        return fields | {"gateway_reached": self.gateway_reached}


def eval_network_name(root: Path) -> str:
    return f"hitch-{root_label(root)[:8]}-eval"


def _labels(root: Path, role: str) -> dict[str, str]:
    return {LABEL_ROOT: root_label(root), LABEL_ROLE: role}


def _describe(attrs: dict[str, Any]) -> EvalNetwork:
    configs = (attrs.get("IPAM") or {}).get("Config") or []
    ipv4 = next((c for c in configs if c.get("Subnet") and ":" not in str(c["Subnet"])), None)
    if ipv4 is None or not ipv4.get("Gateway"):
        raise HitchError(
            "local_inference_topology_unsupported",
            "the eval network has no IPv4 gateway address on this host; containers cannot reach the gateway",
            {"network": attrs.get("Name")},
        )
    return EvalNetwork(str(attrs["Id"]), str(attrs["Name"]), str(ipv4["Subnet"]), str(ipv4["Gateway"]))


def ensure_eval_network(root: Path, *, client: docker.DockerClient | None = None) -> EvalNetwork:
    """This root's eval network: the one hitch labelled for it, or a new one (internal bridge)."""
    client = client or docker_client()
    name = eval_network_name(root)
    labels = _labels(root, _ROLE_NETWORK)
    with translate_docker_errors("find the eval network", api_error_code="docker_unavailable"):
        found = client.api.networks(names=[name], filters={"label": f"{LABEL_ROOT}={labels[LABEL_ROOT]}"})
        for net in found:
            attrs = client.api.inspect_network(net["Id"])
            ours = all((attrs.get("Labels") or {}).get(k) == v for k, v in labels.items())
            if attrs.get("Name") == name and ours and attrs.get("Internal") and attrs.get("Driver") == "bridge":
                return _describe(attrs)
    with translate_docker_errors("create the eval network", api_error_code="local_inference_topology_unsupported"):
        created = client.networks.create(name, driver="bridge", internal=True, labels=labels, check_duplicate=True)
        return _describe(client.api.inspect_network(created.id))


def remove_eval_network(root: Path, *, client: docker.DockerClient | None = None) -> bool:
    """Remove this root's eval network (and leftover probe containers); False when a container still uses it."""
    client = client or docker_client()
    with translate_docker_errors("remove the eval network", api_error_code="docker_unavailable"):
        probes = client.api.containers(all=True, filters={"label": f"{LABEL_ROLE}={_ROLE_PROBE}"})
        for c in probes:
            if (c.get("Labels") or {}).get(LABEL_ROOT) == root_label(root):
                with contextlib.suppress(docker.errors.NotFound):
                    client.api.remove_container(c["Id"], v=True, force=True)
        for net in client.api.networks(names=[eval_network_name(root)], filters={"label": f"{LABEL_ROLE}={_ROLE_NETWORK}"}):
            attrs = client.api.inspect_network(net["Id"])
            if (attrs.get("Labels") or {}).get(LABEL_ROOT) != root_label(root):
                continue
            if attrs.get("Containers"):
                return False
            unguard_bridge(f"br-{net['Id'][:12]}")
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_network(net["Id"])
    return True


def probe_network(
    root: Path,
    network: EvalNetwork,
    image: str,
    gateway_url: str,
    engine_targets: list[str] | None = None,
    *,
    client: docker.DockerClient | None = None,
    timeout_s: float = _PROBE_TIMEOUT_S,
) -> ProbeResult:
    """Run the probe in a throwaway container of ``image`` on ``network``; the container is always removed.

    ``gateway_url`` is a gateway path for a binding that does not exist (hitch's gateway answers 401 with
    ``inference_token_invalid``); ``engine_targets`` are ``host:port`` addresses that must not accept.
    """
    ref = require_pinned_image(image)
    client = client or docker_client()
    name = f"{network.name}-probe-{secrets.token_hex(3)}"
    argv = [str(timeout_s), gateway_url, *(engine_targets or [])]
    container_id: str | None = None
    try:
        with translate_docker_errors("run the eval network probe", api_error_code="local_inference_topology_unsupported"):
            container = client.containers.create(
                ref,
                entrypoint=["python3", "-c", _PROBE],
                command=argv,
                name=name,
                network=network.name,
                labels=_labels(root, _ROLE_PROBE),
                user="65534:65534",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                mem_limit=256 * 1024 * 1024,
                detach=True,
            )
            container_id = container.id
            container.start()
            status = container.wait(timeout=_PROBE_WAIT_S)
            raw = container.logs(stdout=True, stderr=False).decode("utf-8", "replace").strip()
            errors = container.logs(stdout=False, stderr=True).decode("utf-8", "replace").strip()
    finally:
        if container_id is not None:
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(container_id, v=True, force=True)
    try:
        data = json.loads(raw.splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise HitchError(
            "local_inference_topology_unsupported",
            "the eval network probe did not run in the eval image (it needs python3)",
            {"exit": status.get("StatusCode"), "stderr": errors[-300:]},
        ) from exc
    gw = data.get("gateway") or {}
    code = None
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        code = json.loads(gw.get("body", ""))["error"]["code"]
    return ProbeResult(gw.get("status"), code, gw.get("error"), list(data.get("engine") or []), raw)


def require_gateway_reachable(probe: ProbeResult, network: EvalNetwork) -> None:
    if not probe.gateway_reached:
        raise HitchError(
            "local_inference_topology_unsupported",
            "a container on hitch's eval network cannot reach the gateway at the bridge address "
            "(custom network, rootless or remote Docker?)",
            {"network": network.name, "gateway_ip": network.gateway_ip, "probe": probe.to_json()},
        )


def require_engine_unreachable(probe: ProbeResult, network: EvalNetwork) -> None:
    reached = probe.engine_reached
    if reached:
        raise HitchError(
            "local_inference_topology_unsupported",
            "a container on hitch's eval network reaches the engine directly; only the gateway may be reachable",
            {"network": network.name, "reached": reached, "probe": probe.to_json()},
        )
