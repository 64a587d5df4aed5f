"""Run bindings: who may use the gateway, against which engine, with which token (spec §10.1-10.2).

Owns :class:`UpstreamTarget` (the gateway's only upstream input, filled by the manager from a verified
service record), :class:`Binding` (one registered run: its ``ModelEndpointBindingV1`` record, its run
token and its target) and :class:`BindingRegistry` (register, revoke, seal, epoch changes, and the
per-request resolution that enforces all of them).

The upstream of a run comes only from the ``UpstreamTarget`` handed to :meth:`BindingRegistry.register`;
nothing here reads the environment, so no variable or cloud default can ever become an upstream. An upstream
is a loopback address, or — only when the service record's process identity says launcher ``oci`` with the
container, the internal network hitch created for the epoch and its subnet — an address inside that subnet
(:func:`container_upstream_refusal`; the daemon checks the record against Docker before it builds a target). The run
token lives in memory and in a 0600 file inside a 0700 private directory; the record holds only the path.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from gateway.capture import RunCapture
from gateway.context_check import ContextChecker
from harness.contracts.binding import BindingCapabilitiesV1, ModelEndpointBindingV1
from harness.contracts.lock import InferenceLockV1
from harness.contracts.service import ProcessIdentityV1
from harness.errors import HitchError
from harness.paths import ensure_private_dir, write_secret

__all__ = ["Binding", "BindingRegistry", "UpstreamTarget", "container_upstream_refusal", "run_path_prefix"]

_TOKEN_PREFIX = "hitch-run-"
_LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def container_upstream_refusal(host: str | None, process: ProcessIdentityV1 | None) -> str | None:
    """Why ``host`` may not be the address of the container ``process`` names, or None when it may.

    A container address is an IP literal (never a name: a name resolves to anything) inside the subnet of
    the internal network the record names, for launcher ``oci`` with a container and a network; neither the
    subnet nor the address may be loopback, link-local, multicast, unspecified or public.
    """
    if process is None or process.launcher != "oci":
        return "only an oci service record may name a container address"
    if not (process.container_id and process.network_id and process.network_subnet):
        return "the service record names no container, network or subnet"
    try:
        address = ipaddress.ip_address(host or "")
        subnet = ipaddress.ip_network(process.network_subnet, strict=True)
    except ValueError:
        return "a container upstream is an IP literal inside a CIDR subnet"
    if address.version != subnet.version or address not in subnet:
        return "the address is outside the subnet of the engine's network"
    special = (subnet.is_loopback, subnet.is_link_local, subnet.is_multicast, subnet.is_unspecified, not subnet.is_private)
    if any(special) or address.is_loopback or address.is_link_local or address.is_unspecified:
        return "the engine's network must be a private, non-loopback subnet"
    if address == subnet.network_address or (subnet.version == 4 and address == subnet.broadcast_address):
        return "the address is the subnet's network or broadcast address"
    return None


def run_path_prefix(binding_id: str) -> str:
    """The path prefix of one run's API on the gateway: ``/runs/<binding_id>/v1``."""
    return f"/runs/{binding_id}/v1"


@dataclass(frozen=True)
class UpstreamTarget:
    """One engine service as the manager's verified service record describes it.

    ``base_url`` is the engine's loopback URL (``http://127.0.0.1:PORT``), or for an ``oci`` service its
    address on the network ``process`` names; ``engine_key`` is the engine's API key (never logged, never in
    a record); ``wire_model`` is the only model name a run sees and the name the engine serves;
    ``tokenizer_dir`` holds the model's ``tokenizer.json`` and chat template; ``process`` is the verified
    service record's process identity.
    """

    base_url: str
    engine_key: str
    service_id: str
    inference_id: str
    epoch: int
    lock: InferenceLockV1
    wire_model: str
    tokenizer_dir: Path
    process: ProcessIdentityV1 | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "http" or port is None:
            raise HitchError("inference_route_unavailable", "an upstream is http://host:port", {"service_id": self.service_id})
        oci = self.process is not None and self.process.launcher == "oci"
        if oci or parts.hostname not in _LOOPBACK_HOSTS:
            why = container_upstream_refusal(parts.hostname, self.process)
            if why is not None:
                raise HitchError(
                    "inference_route_unavailable",
                    f"an upstream must be loopback, or the container address of a verified oci service record: {why}",
                    {"service_id": self.service_id},
                )
        if parts.path not in ("", "/") or parts.query or parts.username or parts.password:
            raise HitchError("inference_route_unavailable", "an upstream URL carries no path, query or credentials", {})
        if self.lock.inference_id != self.inference_id:
            raise HitchError(
                "inference_lock_mismatch",
                "the upstream's inference_id is not its lock's",
                {"service_id": self.service_id, "inference_id": self.inference_id},
            )
        if not self.engine_key:
            raise HitchError("inference_route_unavailable", "an upstream without an engine key is refused", {})

    @property
    def origin(self) -> str:
        return self.base_url.rstrip("/")

    def __repr__(self) -> str:  # never show the engine key
        return f"UpstreamTarget(service_id={self.service_id!r}, epoch={self.epoch}, base_url={self.base_url!r})"


@dataclass
class Binding:
    """One registered run: its record, its token (memory only) and its fixed upstream."""

    record: ModelEndpointBindingV1
    token: bytes = field(repr=False)
    target: UpstreamTarget
    queue_timeout_ms: int
    checker: ContextChecker
    capture: RunCapture | None = None  # this run's own capture (None: the gateway's); never changed
    listen_host: str | None = None  # a container-facing binding: the only listener address that serves it
    deadline_at: float | None = None  # monotonic: the run's deadline, set by its first request (see time_left)

    def time_left(self, now: float) -> float | None:
        """Seconds left of the run's deadline (None: the run has none). The candidate's clock starts at its
        first model request, so environment setup before it (a Harbor trial's container) is not its time;
        from then on queue waits, inference and tool time all spend it (spec §9.2)."""
        budget = self.record.deadline_s
        if budget is None:
            return None
        if self.deadline_at is None:
            self.deadline_at = now + budget
        return self.deadline_at - now

    @property
    def binding_id(self) -> str:
        return self.record.binding_id

    @property
    def run_id(self) -> str:
        return self.record.run_id


# a container-facing listener: (host, origin)
Listener = tuple[str, str]


class BindingRegistry:
    """All bindings of one gateway; every request is resolved here before anything else happens."""

    def __init__(self, private_dir: Path, gateway_origin: str) -> None:
        self._private_dir = private_dir
        self._origin = gateway_origin.rstrip("/")
        self._by_id: dict[str, Binding] = {}
        self._active_run: dict[str, str] = {}
        self._service_epoch: dict[str, int] = {}

    @property
    def origin(self) -> str:
        return self._origin

    def set_origin(self, origin: str) -> None:
        """The gateway's public origin, known once its port is bound."""
        self._origin = origin.rstrip("/")

    def register(
        self,
        run_id: str,
        target: UpstreamTarget,
        queue_timeout_ms: int | None,
        capture: RunCapture | None,
        listener: Listener | None,
        deadline_s: float | None = None,
    ) -> ModelEndpointBindingV1:
        """Bind ``run_id`` to ``target``; returns the record (the token is in the file it names). With a
        ``listener`` (host, origin) the binding is served only there and its base URL is on that origin;
        with ``deadline_s`` every request of the run is bounded by what is left of it (:meth:`Binding.time_left`)."""
        if not run_id or len(run_id) > 200:
            raise HitchError("usage_error", "a run id is 1..200 characters", {})
        if deadline_s is not None and not deadline_s > 0:
            raise HitchError("usage_error", "a run's deadline is a positive number of seconds", {"deadline_s": deadline_s})
        if run_id in self._active_run:
            raise HitchError("usage_error", f"run {run_id!r} already has an active binding; revoke it first", {"run_id": run_id})
        current = self._service_epoch.get(target.service_id)
        if current is not None and target.epoch < current:
            raise HitchError(
                "inference_binding_revoked",
                "the target's epoch is older than the service's current epoch",
                {"service_id": target.service_id, "epoch": target.epoch, "current_epoch": current},
            )
        self._service_epoch[target.service_id] = target.epoch
        binding_id = "b" + secrets.token_hex(12)
        token = _TOKEN_PREFIX + secrets.token_urlsafe(32)
        token_path = ensure_private_dir(self._private_dir) / f"{binding_id}.token"
        write_secret(token_path, token)
        protocol = target.lock.protocol
        capabilities = BindingCapabilitiesV1(
            streaming=protocol.streaming,
            tool_calls=protocol.tool_calls,
            parallel_tool_calls=protocol.parallel_tool_calls,
            input_modalities=list(protocol.input_modalities),
        )
        record = ModelEndpointBindingV1(
            api=protocol.api,
            capabilities=capabilities,
            binding_id=binding_id,
            run_id=run_id,
            service_id=target.service_id,
            inference_id=target.inference_id,
            epoch=target.epoch,
            wire_model=target.wire_model,
            base_url=(listener[1].rstrip("/") if listener else self._origin) + run_path_prefix(binding_id),
            token_ref=str(token_path),
            state="active",
            created_at=time.time(),
            deadline_s=deadline_s,
        )
        timeout = queue_timeout_ms if queue_timeout_ms is not None else target.lock.execution.queue_timeout_ms
        checker = ContextChecker.for_dir(target.tokenizer_dir)
        listen_host = listener[0] if listener else None
        self._by_id[binding_id] = Binding(record, token.encode(), target, timeout, checker, capture, listen_host)
        self._active_run[run_id] = binding_id
        return record

    def get(self, binding_id: str) -> Binding | None:
        return self._by_id.get(binding_id)

    def records(self) -> list[ModelEndpointBindingV1]:
        return [b.record for b in self._by_id.values()]

    def _set_state(self, binding_id: str, state: str) -> ModelEndpointBindingV1:
        binding = self._by_id.get(binding_id)
        if binding is None:
            raise HitchError("inference_route_unavailable", "no such binding", {"binding_id": binding_id})
        if binding.record.state == "active":
            binding.record = binding.record.model_copy(update={"state": state})
            self._active_run.pop(binding.run_id, None)
            with_path = Path(binding.record.token_ref)
            with_path.unlink(missing_ok=True)
        return binding.record

    def revoke(self, binding_id: str) -> ModelEndpointBindingV1:
        """No request of this binding is served any more; its token file is removed (idempotent)."""
        return self._set_state(binding_id, "revoked")

    def seal(self, binding_id: str) -> ModelEndpointBindingV1:
        """The run is over: like revoke, but answered ``inference_run_sealed`` (idempotent)."""
        return self._set_state(binding_id, "sealed")

    def revoke_service(self, service_id: str) -> list[ModelEndpointBindingV1]:
        """The engine failed or is draining: revoke every active binding of ``service_id``."""
        return [
            self.revoke(b.binding_id)
            for b in list(self._by_id.values())
            if b.target.service_id == service_id and b.record.state == "active"
        ]

    def set_service_epoch(self, service_id: str, epoch: int) -> None:
        """A new epoch of ``service_id`` started: bindings issued for older epochs stop working."""
        self._service_epoch[service_id] = max(epoch, self._service_epoch.get(service_id, epoch))

    def resolve(self, binding_id: str, presented: bytes | None) -> Binding:
        """The binding a request may use, or a HitchError with the stable code that says why not.

        The token is compared in constant time; an unknown binding and a wrong token look the same.
        """
        binding = self._by_id.get(binding_id)
        expected = binding.token if binding is not None else b"\x00" * 48
        ok = presented is not None and hmac.compare_digest(presented, expected)
        if binding is None or not ok:
            raise HitchError("inference_token_invalid", "missing or invalid run token", {})
        state = binding.record.state
        if state == "sealed":
            raise HitchError("inference_run_sealed", "this run is sealed", {"run_id": binding.run_id})
        if state == "revoked":
            raise HitchError("inference_binding_revoked", "this run's binding was revoked", {"run_id": binding.run_id})
        current = self._service_epoch.get(binding.target.service_id, binding.target.epoch)
        if binding.target.epoch != current:
            raise HitchError(
                "inference_binding_revoked",
                "the service moved to a new epoch; this binding is stale",
                {"run_id": binding.run_id, "epoch": binding.target.epoch, "current_epoch": current},
            )
        return binding
