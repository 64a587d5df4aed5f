"""Operator pins: ``hitch runtime pin NAME`` records the digest of an OCI image already in the local Docker engine.

The catalog ships some OCI runtimes without a digest (no registry was reachable where it was written). An
operator who has the image locally pins it for *their* HITCH_ROOT: the digest goes to an overlay,
``$HITCH_ROOT/catalog/runtime-pins.json`` — never into the repository's catalog — and catalog loading applies
it (:func:`harness.runtimes.catalog.load_catalog`; :func:`harness.runtimes.catalog.pin_runtime` writes it).
The runtime then says ``pinned_by: operator`` (its record, its ``runtime_id``, every lock and signed entry made
with it), so nobody mistakes a local pin for the catalog's.

Which digest: the image's ``RepoDigests`` entry for the catalog's repository (the registry manifest digest,
``source: repo_digest``) when the image was pulled; an image only built or loaded locally has none, and then
its image ID (the config digest, ``source: image_id``) is recorded and the engine is launched by that ID.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256, parse_record
from harness.docker_engine import docker_client
from harness.errors import HitchError
from harness.paths import atomic_write_json

__all__ = ["RuntimePinV1", "RuntimePinsV1", "choose_digest", "inspect_image", "read_pins", "repository_of", "write_pins"]

DigestSource = Literal["repo_digest", "image_id"]


class RuntimePinV1(Record):
    name: str
    image_ref: str = Field(description="the local image that was inspected (tag, id or digest reference)")
    digest: Sha256
    source: DigestSource = Field(description="repo_digest: registry manifest digest; image_id: local image ID")
    pinned_at: float


class RuntimePinsV1(Record):
    schema_version: Literal["1"] = "1"
    pins: dict[str, RuntimePinV1] = Field(default_factory=dict)


def read_pins(path: Path) -> dict[str, RuntimePinV1]:
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise HitchError("runtime_catalog_invalid", f"cannot read the operator pins {path}: {exc.strerror}", {}) from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise HitchError("runtime_catalog_invalid", f"the operator pins {path} are not JSON", {"path": str(path)}) from exc
    return parse_record(RuntimePinsV1, data, "runtime_catalog_invalid").pins


def write_pins(path: Path, pins: dict[str, RuntimePinV1]) -> None:
    atomic_write_json(path, RuntimePinsV1(pins=pins).to_json_dict())


def repository_of(reference: str) -> str:
    """``docker.io/library/x@sha256:..`` → ``x``; ``lmsysorg/sglang@...`` → ``lmsysorg/sglang``."""
    repo = reference.split("@", 1)[0]
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        repo = repo.removeprefix(prefix)
    return repo.removeprefix("library/")


def choose_digest(attrs: Mapping[str, Any], repository: str) -> tuple[str, DigestSource]:
    """The digest to pin from ``docker image inspect`` attributes: the catalog repository's RepoDigest, else the ID."""
    wanted = repository_of(repository)
    for ref in attrs.get("RepoDigests") or []:
        if isinstance(ref, str) and "@sha256:" in ref and repository_of(ref) == wanted:
            return ref.split("@", 1)[1], "repo_digest"
    image_id = attrs.get("Id")
    if not isinstance(image_id, str) or not image_id.startswith("sha256:"):
        raise HitchError("inference_runtime_unavailable", "the local image has neither a RepoDigest nor an image ID", {})
    return image_id, "image_id"


def inspect_image(ref: str) -> Mapping[str, Any]:
    """``docker image inspect REF`` attributes; ``docker_unavailable`` when the engine does not answer."""
    import docker.errors

    client = docker_client()
    try:
        attrs: Mapping[str, Any] = client.images.get(ref).attrs
        return attrs
    except docker.errors.ImageNotFound as exc:
        raise HitchError(
            "inference_runtime_unavailable",
            f"image {ref} is not present in the local Docker engine (load or pull it first)",
            {"image": ref},
        ) from exc
    except docker.errors.DockerException as exc:
        raise HitchError("docker_unavailable", f"cannot inspect {ref}: {type(exc).__name__}", {"image": ref}) from exc
    finally:
        client.close()
