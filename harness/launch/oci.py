"""The ``oci`` launcher: one engine epoch = one labelled container on its own internal network.

Owns the container lifecycle through the docker SDK (sync calls run in ``asyncio.to_thread``):

- ``start``: pinned image only, a fresh ``internal=True`` network (no egress, no DNS) created for this
  start, the container created with the settings of :mod:`harness.launch.oci_config` and started; the host
  reaches the engine at the container's IP on that network (port publishing is silently dropped on
  internal networks), so ``base_url`` is ``http://<container ip>:<port>``; the identity records the
  network id and subnet (:func:`verify_container_route` checks them against Docker before the gateway
  routes there). As root with iptables, host firewall rules on the network's bridge
  (:mod:`harness.launch.host_guard`) keep the engine from every host service; replies to the host pass.
  The engine's output is copied to ``spec.log_path`` (0600) while it runs, redacted line by line exactly
  as the process launcher's (:class:`harness.engine.redaction.LineRedactor`).
- ``poll``: container state; an exit is ``ExitInfo(code, oom=...)`` where OOM is what the Docker daemon
  confirms: ``State.OOMKilled``, or — because the daemon's exit handling can overwrite that flag when the
  kernel's OOM event and the exit event race (seen here about once in a full test run) — an ``oom`` event
  for this container in the daemon's own event log. A plain kill is 137 too, so an exit without either is
  never called OOM.
- ``stop``: SIGTERM, SIGKILL after the timeout, wait for the exit, remove the container and its network,
  and confirm both are gone.
- ``list_owned_containers`` / ``remove_owned``: by ``dev.hitch.root`` label, for recovery; nothing without
  our root label is ever stopped or removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors

from harness.contracts.service import ProcessIdentityV1
from harness.docker_engine import docker_client, translate_docker_errors
from harness.engine.launch_spec import ExitInfo, LaunchSpec
from harness.engine.redaction import LineRedactor, secret_values
from harness.errors import HitchError
from harness.launch.host_guard import guard_bridge, guard_unavailable, unguard_bridge
from harness.launch.oci_config import (
    LABEL_EPOCH,
    LABEL_INFERENCE_ID,
    LABEL_ROOT,
    LABEL_SERVICE,
    ContainerOptions,
    container_kwargs,
    network_name,
    owner_labels,
    require_pinned_image,
    root_label,
)

__all__ = ["OciEngine", "OciLauncher", "OwnedContainer", "list_owned_containers", "remove_owned", "verify_container_route"]

_EXITED = ("exited", "dead")


class OciLauncher:
    """Starts engines as containers for one HITCH_ROOT. ``client`` defaults to ``docker.from_env()``."""

    kind: Literal["oci"] = "oci"

    def __init__(self, root: Path, *, client: docker.DockerClient | None = None, options: ContainerOptions | None = None) -> None:
        self.root = Path(root)
        self.options = options or ContainerOptions()
        self._client = client

    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client()
        return self._client

    async def start(self, spec: LaunchSpec) -> OciEngine:
        ref = require_pinned_image(spec.image)
        return await asyncio.to_thread(self._start_sync, spec, ref)

    def _start_sync(self, spec: LaunchSpec, ref: str) -> OciEngine:
        client = self.client()
        with translate_docker_errors(f"resolve image {ref}"):
            image = client.images.get(ref)
        labels = owner_labels(self.root, spec)
        name = network_name(self.root, spec)
        kwargs = container_kwargs(spec, image_id=image.id, labels=labels, network=name, name=name, options=self.options)
        with translate_docker_errors("create the engine network"):
            network = client.networks.create(name, driver="bridge", internal=True, labels=labels, check_duplicate=True)
        container = None
        try:
            if guard_unavailable() is None:  # the engine reaches no host service (replies to the host still pass)
                guard_bridge(_bridge(network.id), [])
            with translate_docker_errors("create the engine container"):
                container = client.containers.create(**kwargs)
            with translate_docker_errors("start the engine container"):
                container.start()
                container.reload()
            ip = container.attrs["NetworkSettings"]["Networks"][name]["IPAddress"]
            if not ip:
                raise HitchError("inference_process_exited", "the engine container has no address on its network")
            with translate_docker_errors("inspect the engine network"):
                subnet = _ipv4_subnet(client.api.inspect_network(network.id))
        except BaseException:
            _remove_quietly(client, container.id if container is not None else None, network.id)
            raise
        identity = ProcessIdentityV1(
            launcher="oci", container_id=container.id, image_id=image.id, network_id=network.id, network_subnet=subnet
        )
        return OciEngine(
            client,
            identity,
            network_id=network.id,
            base_url=f"http://{ip}:{spec.port}",
            log_path=spec.log_path,
            secrets=secret_values(spec.secret_files),
        )


class OciEngine:
    """A started engine container (the :class:`~harness.engine.launch_spec.LaunchedEngine` of ``oci``)."""

    def __init__(
        self,
        client: docker.DockerClient,
        identity: ProcessIdentityV1,
        *,
        network_id: str,
        base_url: str,
        log_path: Path,
        secrets: list[str] | None = None,
    ) -> None:
        self.identity = identity
        self._client = client
        self._network_id = network_id
        self._base_url = base_url
        self._exit: ExitInfo | None = None
        self._log_thread = threading.Thread(target=self._copy_logs, args=(log_path, LineRedactor(secrets or ())), daemon=True)
        self._log_thread.start()

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def container_id(self) -> str:
        assert self.identity.container_id is not None
        return self.identity.container_id

    @property
    def network_id(self) -> str:
        return self._network_id

    async def poll(self) -> ExitInfo | None:
        if self._exit is None:
            self._exit = await asyncio.to_thread(self._poll_sync)
        return self._exit

    async def stop(self, timeout_s: float) -> ExitInfo:
        if self._exit is None or not await asyncio.to_thread(self._gone):
            self._exit = await asyncio.to_thread(self._stop_sync, timeout_s)
        return self._exit

    def _poll_sync(self) -> ExitInfo | None:
        try:
            with translate_docker_errors("inspect the engine container"):
                attrs = self._client.api.inspect_container(self.container_id)
        except HitchError as exc:
            if exc.details.get("status") == 404:
                return ExitInfo(None, False, "the engine container is gone")
            raise
        return self._confirm_oom(_exit_from_state(attrs["State"]), attrs["State"])

    def _confirm_oom(self, exit_info: ExitInfo | None, state: dict[str, Any]) -> ExitInfo | None:
        if exit_info is None or exit_info.oom or exit_info.exit_code != 137:
            return exit_info
        if not daemon_logged_oom(self._client, self.container_id, str(state.get("StartedAt") or "")):
            return exit_info
        reason = "killed by the kernel OOM killer at the container memory limit (exit 137; the daemon's oom event)"
        return ExitInfo(137, True, reason)

    def _stop_sync(self, timeout_s: float) -> ExitInfo:
        api = self._client.api
        exit_info: ExitInfo | None = self._exit
        with translate_docker_errors("stop the engine container"):
            try:
                api.stop(self.container_id, timeout=max(0, math.ceil(timeout_s)))
                api.wait(self.container_id, timeout=max(30, math.ceil(timeout_s) + 30))
                state = api.inspect_container(self.container_id)["State"]
                exit_info = self._confirm_oom(_exit_from_state(state), state)
                if exit_info is not None and exit_info.exit_code == 137 and not exit_info.oom:
                    # docker stop's SIGKILL after the grace (the init forwards SIGTERM; a drained engine exits 0)
                    exit_info = dataclasses.replace(exit_info, escalated=True)
            except docker.errors.NotFound:
                exit_info = exit_info or ExitInfo(None, False, "the engine container is gone")
        self._log_thread.join(timeout=5)
        with translate_docker_errors("remove the engine container and network"):
            _remove_quietly(self._client, self.container_id, self._network_id)
            if not self._gone():
                raise HitchError("internal_error", "the engine container or its network is still present after removal")
        if exit_info is None:  # pragma: no cover - a stopped container always has an exit state
            exit_info = ExitInfo(None, False, "stopped")
        return exit_info

    def _gone(self) -> bool:
        for getter, key in ((self._client.containers.get, self.container_id), (self._client.networks.get, self._network_id)):
            try:
                getter(key)
            except docker.errors.NotFound:
                continue
            return False
        return True

    def _copy_logs(self, log_path: Path, redactor: LineRedactor) -> None:
        """Append the engine's stdout/stderr, redacted, to ``log_path`` (0600) until the container ends."""
        with contextlib.suppress(Exception):
            log_path.parent.mkdir(parents=True, exist_ok=True)
            stream = self._client.api.logs(self.container_id, stream=True, follow=True)
            try:
                fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                with os.fdopen(fd, "ab", buffering=0) as fh:
                    for chunk in stream:
                        fh.write(redactor.feed(chunk))
                    fh.write(redactor.finish())
            finally:
                stream.close()


def _ipv4_subnet(network_attrs: dict[str, Any]) -> str | None:
    configs = (network_attrs.get("IPAM") or {}).get("Config") or []
    return next((str(c["Subnet"]) for c in configs if c.get("Subnet") and ":" not in str(c["Subnet"])), None)


def verify_container_route(
    root: Path,
    service_id: str,
    epoch: int,
    identity: ProcessIdentityV1,
    address: str,
    *,
    client: docker.DockerClient | None = None,
) -> None:
    """Refuse (``inference_route_unavailable``) unless Docker confirms what an oci service record claims.

    The network must exist, be ``internal``, carry this root's, service's and epoch's ownership labels and
    have the recorded subnet; the container must be attached to it at ``address`` and carry the same labels.
    Sync (docker SDK): call it via ``asyncio.to_thread`` from async code.
    """

    def refuse(why: str) -> HitchError:
        return HitchError("inference_route_unavailable", f"the container route is not hitch's: {why}", {"service_id": service_id})

    if identity.launcher != "oci" or not identity.network_id or not identity.container_id:
        raise refuse("the record names no oci container and network")
    client = client or docker_client()
    want = {LABEL_ROOT: root_label(root), LABEL_SERVICE: service_id, LABEL_EPOCH: str(epoch)}
    try:
        with translate_docker_errors("inspect the engine network", api_error_code="docker_unavailable"):
            net = client.api.inspect_network(identity.network_id)
            container = client.api.inspect_container(identity.container_id)
    except HitchError as exc:
        if exc.details.get("status") == 404:
            raise refuse("the network or container is gone") from exc
        raise
    labels = net.get("Labels") or {}
    if net.get("Id") != identity.network_id or any(labels.get(k) != v for k, v in want.items()):
        raise refuse("the network is not the one hitch created for this service epoch")
    if not net.get("Internal"):
        raise refuse("the network is not internal")
    if _ipv4_subnet(net) != identity.network_subnet:
        raise refuse("the network's subnet is not the recorded one")
    c_labels = (container.get("Config") or {}).get("Labels") or {}
    if container.get("Id") != identity.container_id or any(c_labels.get(k) != v for k, v in want.items()):
        raise refuse("the container is not the one hitch started for this service epoch")
    attached = (net.get("Containers") or {}).get(identity.container_id) or {}
    if str(attached.get("IPv4Address", "")).split("/")[0] != address:
        raise refuse("the container is not attached to the network at the recorded address")


def _exit_from_state(state: dict[str, Any]) -> ExitInfo | None:
    if state.get("Status") not in _EXITED:
        return None
    code = int(state.get("ExitCode", -1))
    oom = bool(state.get("OOMKilled"))
    reason = f"killed by the kernel OOM killer at the container memory limit (exit {code})" if oom else f"exited with code {code}"
    if state.get("Error"):
        reason += f": {state['Error']}"
    return ExitInfo(code, oom, reason)


_OOM_EVENT_GRACE_S = 2


def daemon_logged_oom(client: docker.DockerClient, container_id: str, started_at: str) -> bool:
    """Whether the daemon's event log holds an ``oom`` event for this container since it started. The
    query ends a short grace after now, so an OOM event still on its way from containerd is seen."""
    since = _docker_time(started_at)
    if since is None:
        return False
    until = int(time.time()) + _OOM_EVENT_GRACE_S
    with contextlib.suppress(docker.errors.APIError, docker.errors.DockerException):
        events = client.api.events(since=since, until=until, filters={"container": container_id, "event": "oom"}, decode=True)
        return any(e.get("Action") == "oom" for e in events)
    return False


def _docker_time(text: str) -> int | None:
    """Docker's RFC 3339 time with nanoseconds ("2026-12-01T19:20:01.123456789Z") → epoch seconds."""
    try:
        return int(datetime.fromisoformat(text[:19]).replace(tzinfo=UTC).timestamp())
    except ValueError:
        return None


def _remove_quietly(client: docker.DockerClient, container_id: str | None, network_id: str | None) -> None:
    """Force-remove a container (and its anonymous volumes) then a network; absent is fine."""
    if container_id is not None:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(container_id, v=True, force=True)
    if network_id is not None:
        unguard_bridge(_bridge(network_id))
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_network(network_id)


def _bridge(network_id: str) -> str:
    """The host interface Docker gives a bridge network."""
    return f"br-{network_id[:12]}"


@dataclass(frozen=True)
class OwnedContainer:
    container_id: str
    name: str
    status: str
    image_id: str
    service_id: str | None
    epoch: int | None
    inference_id: str | None
    labels: dict[str, str]


def list_owned_containers(root: Path, *, client: docker.DockerClient | None = None) -> list[OwnedContainer]:
    """Every container (running or not) carrying this root's ``dev.hitch.root`` label. Sync: call it via
    ``asyncio.to_thread`` from async code."""
    client = client or docker_client()
    with translate_docker_errors("list owned containers", api_error_code="docker_unavailable"):
        found = client.api.containers(all=True, filters={"label": f"{LABEL_ROOT}={root_label(root)}"})
    owned = []
    for c in found:
        labels = dict(c.get("Labels") or {})
        epoch = labels.get(LABEL_EPOCH)
        owned.append(
            OwnedContainer(
                container_id=c["Id"],
                name=(c.get("Names") or ["?"])[0].lstrip("/"),
                status=c.get("State", "unknown"),
                image_id=c.get("ImageID", ""),
                service_id=labels.get(LABEL_SERVICE),
                epoch=int(epoch) if epoch and epoch.isdigit() else None,
                inference_id=labels.get(LABEL_INFERENCE_ID),
                labels=labels,
            )
        )
    return owned


def remove_owned(
    root: Path,
    *,
    container_ids: list[str] | None = None,
    service_id: str | None = None,
    timeout_s: float = 10.0,
    client: docker.DockerClient | None = None,
) -> list[str]:
    """Stop (SIGTERM, then SIGKILL after ``timeout_s``) and remove this root's containers — all of them, or
    those in ``container_ids`` / of ``service_id`` — then this root's networks left without containers.
    An id that is not ours is ignored, never touched. Returns the removed container ids."""
    client = client or docker_client()
    label = f"{LABEL_ROOT}={root_label(root)}"
    chosen = [
        c
        for c in list_owned_containers(root, client=client)
        if (container_ids is None or c.container_id in container_ids) and (service_id is None or c.service_id == service_id)
    ]
    removed = []
    with translate_docker_errors("remove owned containers", api_error_code="docker_unavailable"):
        for c in chosen:
            with contextlib.suppress(docker.errors.NotFound):
                if c.status == "running":
                    client.api.stop(c.container_id, timeout=max(0, math.ceil(timeout_s)))
                client.api.remove_container(c.container_id, v=True, force=True)
            removed.append(c.container_id)
        for net in client.api.networks(filters={"label": label}):
            if service_id is not None and (net.get("Labels") or {}).get(LABEL_SERVICE) != service_id:
                continue
            detail = client.api.inspect_network(net["Id"])
            if not detail.get("Containers"):
                unguard_bridge(_bridge(net["Id"]))
                with contextlib.suppress(docker.errors.NotFound):
                    client.api.remove_network(net["Id"])
    return removed
