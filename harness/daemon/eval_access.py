"""Container-facing runs of the daemon: eval containers reach the gateway, and nothing else (spec §11.1).

:class:`EvalAccess` owns, for one daemon, hitch's eval network (:mod:`harness.launch.eval_network`), the
gateway's listener on that network's bridge address, the host firewall rules that leave that listener the
only host service a container there reaches (:mod:`harness.launch.host_guard`; root with iptables, else the
doctor's stated limit), and the probes: before a container-facing run admits anything, a throwaway
container of the run's eval image must reach the gateway there (:meth:`EvalAccess.prepare`); once the run's
service is known, the same kind of container must *not* reach its engine — neither the engine's own address
nor its port on the bridge address (:meth:`EvalAccess.check_engine`, once per service epoch). Either failure
is ``local_inference_topology_unsupported``. At daemon stop the listener closes and the network (with its
rules) is removed unless a container still uses it (a later daemon adopts it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker

from gateway.bindings import run_path_prefix
from gateway.server import Gateway
from harness.docker_engine import docker_client
from harness.errors import HitchError
from harness.launch.eval_network import (
    EvalNetwork,
    ProbeResult,
    ensure_eval_network,
    probe_network,
    remove_eval_network,
    require_engine_unreachable,
    require_gateway_reachable,
)
from harness.launch.host_guard import guard_bridge, guard_unavailable
from harness.launch.oci_config import require_pinned_image

__all__ = ["EvalAccess"]

_log = logging.getLogger(__name__)
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _guard(net: EvalNetwork, origin: str) -> str:
    """Host rules for the eval bridge: only the gateway's listener answers there (see harness.launch.host_guard)."""
    why = guard_unavailable()
    if why is not None:
        _log.warning("eval network %s: other host services stay reachable from it: %s", net.name, why)
        return why
    guard_bridge(net.bridge, [(net.gateway_ip, int(urlsplit(origin).port or 0))])
    return "installed"


class EvalAccess:
    """The eval network, the gateway's listener on it and the reachability probes of one daemon."""

    def __init__(self, root: Path, gateway: Gateway) -> None:
        self.root = root
        self.gateway = gateway
        self.network: EvalNetwork | None = None
        self._client: docker.DockerClient | None = None
        self._mutex = asyncio.Lock()
        self._engine_checked: dict[tuple[str, int], ProbeResult] = {}
        self.last_probe: dict[str, Any] | None = None
        self.host_guard: str | None = None  # "installed", or why the host's other services stay reachable

    def _docker(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client()
        return self._client

    async def prepare(self, image: object) -> EvalNetwork:
        """The network with the gateway listening on its bridge address, proven reachable from ``image``."""
        if not isinstance(image, str):
            raise HitchError("usage_error", "a container-facing run names its eval image (eval_image: an image ID or digest)", {})
        ref = require_pinned_image(image)
        async with self._mutex:
            client = await asyncio.to_thread(self._docker)
            if self.network is None:
                self.network = await asyncio.to_thread(ensure_eval_network, self.root, client=client)
            net = self.network
            origin = await self.gateway.listen_on(net.gateway_ip)
            if self.host_guard != "installed":
                self.host_guard = await asyncio.to_thread(_guard, net, origin)
        url = f"{origin}{run_path_prefix('bprobe')}/models"
        probe = await asyncio.to_thread(probe_network, self.root, net, ref, url, [], client=client)
        self.last_probe = probe.to_json()
        require_gateway_reachable(probe, net)
        return net

    async def check_engine(self, image: str, service_id: str, epoch: int, engine_url: str) -> ProbeResult:
        """The engine of this service epoch is unreachable from the eval network (probed once per epoch)."""
        net = self.network
        if net is None:
            raise HitchError("internal_error", "the eval network is not prepared", {})
        known = self._engine_checked.get((service_id, epoch))
        if known is None:
            parts = urlsplit(engine_url)
            port = parts.port
            targets = [f"{net.gateway_ip}:{port}"]
            if parts.hostname and parts.hostname not in _LOOPBACK:
                targets.insert(0, f"{parts.hostname}:{port}")
            origin = await self.gateway.listen_on(net.gateway_ip)
            url = f"{origin}{run_path_prefix('bprobe')}/models"
            known = await asyncio.to_thread(probe_network, self.root, net, image, url, targets, client=self._docker())
            self._engine_checked[(service_id, epoch)] = known
        require_engine_unreachable(known, net)
        return known

    async def close(self) -> None:
        """Close the listener and remove the network (left in place while a container still uses it)."""
        net, self.network = self.network, None
        if net is None:
            return
        await self.gateway.stop_listening(net.gateway_ip)
        with contextlib.suppress(HitchError):
            if not await asyncio.to_thread(remove_eval_network, self.root, client=self._docker()):
                _log.warning("eval network %s still has containers; left for the next daemon", net.name)
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
