"""What an engine container is created with: pinned image check, ownership labels, create kwargs.

Pure functions (no Docker calls), so the exact security and resource settings are unit-tested without an
engine — and the GPU request, which cannot run here, is inspected as data.

Ownership labels (``dev.hitch.*``) let recovery find the containers and networks of one HITCH_ROOT and
never touch anything else: ``root`` is the sha256 of the resolved root path.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.types import DeviceRequest, LogConfig, Mount

from harness.engine.launch_spec import OWNER_LABEL_PREFIX, LaunchSpec
from harness.errors import HitchError
from harness.ids import sha256_hex

__all__ = [
    "LABEL_EPOCH",
    "LABEL_INFERENCE_ID",
    "LABEL_ROOT",
    "LABEL_SERVICE",
    "ContainerOptions",
    "container_kwargs",
    "network_name",
    "owner_labels",
    "require_pinned_image",
    "root_label",
]

LABEL_ROOT = f"{OWNER_LABEL_PREFIX}.root"
LABEL_SERVICE = f"{OWNER_LABEL_PREFIX}.service"
LABEL_EPOCH = f"{OWNER_LABEL_PREFIX}.epoch"
LABEL_INFERENCE_ID = f"{OWNER_LABEL_PREFIX}.inference_id"

_IMAGE_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_IMAGE_DIGEST_RE = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ContainerOptions:
    """Launcher-wide choices that are not part of a lock.

    ``read_only_rootfs``: on unless an engine needs to write outside ``/tmp`` (spec §11.2 "where the engine
    allows"). ``tmp_bytes``: size cap of the ``/tmp`` and ``HOME`` tmpfs mounts (counted in the container's memory).
    ``user``: ``UID:GID`` the engine runs as; default the caller's, so its 0600 key files stay readable
    and the engine is never a more privileged user than the harness.
    """

    read_only_rootfs: bool = True
    tmp_bytes: int = 512 * 1024 * 1024
    user: str | None = None
    log_max_bytes: int = 50 * 1024 * 1024


def root_label(root: Path) -> str:
    """The ``dev.hitch.root`` value: sha256 of the resolved HITCH_ROOT path."""
    return sha256_hex(str(Path(root).resolve()).encode())


def require_pinned_image(ref: str | None) -> str:
    """An image ID (``sha256:…``) or a digest reference (``name@sha256:…``); a tag is refused."""
    if ref is None or not (_IMAGE_ID_RE.match(ref) or _IMAGE_DIGEST_RE.match(ref)):
        raise HitchError(
            "inference_runtime_unpinned",
            "the OCI launcher runs images by digest or image ID only, never by tag",
            {"image": ref},
        )
    return ref


def owner_labels(root: Path, spec: LaunchSpec) -> dict[str, str]:
    """``spec.labels`` plus the ownership labels, which always win."""
    labels = dict(spec.labels)
    labels.update(
        {
            LABEL_ROOT: root_label(root),
            LABEL_SERVICE: spec.service_id,
            LABEL_EPOCH: str(spec.epoch),
            LABEL_INFERENCE_ID: spec.inference_id,
        }
    )
    return labels


def network_name(root: Path, spec: LaunchSpec) -> str:
    """Unique per start: a leftover of a crashed epoch never blocks the next one."""
    service = sha256_hex(spec.service_id.encode())[:12]
    return f"hitch-{root_label(root)[:8]}-{service}-e{spec.epoch}-{secrets.token_hex(3)}"


def container_kwargs(
    spec: LaunchSpec, *, image_id: str, labels: dict[str, str], network: str, name: str, options: ContainerOptions
) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create`` (docker SDK 7)."""
    if not spec.argv:
        raise HitchError("inference_lock_invalid", "the engine argv is empty")
    memory = spec.resources.memory_bytes
    if memory <= 0:
        raise HitchError("inference_lock_invalid", "an OCI engine needs a memory limit (resources.memory_bytes > 0)")
    mounts = [Mount(target=str(spec.model_dir), source=str(spec.model_dir), type="bind", read_only=True)]
    for inside, host in sorted(spec.secret_files.items()):
        mounts.append(Mount(target=inside, source=str(host), type="bind", read_only=True))
    user = options.user or f"{os.getuid()}:{os.getgid()}"
    kwargs: dict[str, Any] = {
        "image": image_id,
        "entrypoint": spec.argv[:1],
        "command": spec.argv[1:],
        "environment": dict(spec.env),
        "name": name,
        "labels": labels,
        "network": network,
        "mounts": mounts,
        "mem_limit": memory,
        "memswap_limit": memory,  # the default would allow as much swap again
        "nano_cpus": spec.resources.cpu_cores * 1_000_000_000,
        "init": True,  # PID 1 forwards SIGTERM: a graceful stop takes ms, not the stop timeout
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": options.read_only_rootfs,
        "tmpfs": _tmpfs(spec, options, user),
        "user": user,
        "detach": True,
        "log_config": LogConfig(type="json-file", config={"max-size": str(options.log_max_bytes), "max-file": "2"}),
    }
    if spec.resources.shm_bytes > 0:
        kwargs["shm_size"] = spec.resources.shm_bytes
    if spec.device == "cuda":
        if not spec.gpu_uuid:
            raise HitchError("inference_device_unsupported", "a CUDA engine needs the GPU UUID it was leased")
        kwargs["device_requests"] = [DeviceRequest(device_ids=[spec.gpu_uuid], capabilities=[["gpu"]])]
    return kwargs


def _tmpfs(spec: LaunchSpec, options: ContainerOptions, user: str) -> dict[str, str]:
    """``/tmp``, and the engine's private ``HOME``: a host path (the process launcher's), absent from the
    read-only rootfs, where SGLang puts its caches (``SGLANG_CACHE_DIR`` = ``~/.cache/sglang``: torch inductor,
    triton) at import. A tmpfs owned by the engine's user, so nothing of the container outlives it."""
    mounts = {"/tmp": f"rw,nosuid,nodev,size={options.tmp_bytes}"}
    home = spec.env.get("HOME")
    if home and home != "/tmp":
        uid, _, gid = user.partition(":")
        mounts[home] = f"rw,nosuid,nodev,size={options.tmp_bytes},mode=0700,uid={uid},gid={gid or uid}"
    return mounts
