"""Pulling an OCI runtime's pinned image and saying what arrived (spec §5 rule 6, §7.1).

:func:`pull_image` asks Docker for the runtime's image by its pinned digest and follows Docker's pull stream
(the JSON lines of ``POST /images/create``, as docker-py's ``APIClient.pull(stream=True, decode=True)`` yields
them): :class:`PullFollower` prints one progress line when the pull starts, then at most one every
``every_s`` seconds (layers done of those announced, bytes downloaded of those announced), and one at the end —
never a line per chunk. An ``error`` line in the stream is ``inference_runtime_unavailable``.

What arrived is then checked against the pin: the stream's ``Digest:`` line, and the image as
``docker image inspect`` shows it — its ``RepoDigests`` entry for the runtime's repository (a catalog pin, the
registry manifest digest) or its ``Id`` (an operator's pin of a local build) must be the pinned digest, else
``inference_runtime_integrity_failed`` and the runtime is not recorded as installed (nothing is tagged: the
image is only ever addressed by its digest). The image's size, digest and ID are returned and
:func:`record_pull` keeps them beside the runtime's manifest (``store/inference-runtimes/sha256/<hex>/pulled.json``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness.contracts.runtime import InferenceRuntimeManifestV1, OciPackage
from harness.docker_engine import docker_client
from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_json
from harness.runtimes.pins import inspect_image, repository_of

__all__ = ["PullFollower", "PulledImage", "check_pulled_image", "pull_image", "record_pull"]

PROGRESS_EVERY_S = 5.0
_DONE = frozenset({"Pull complete", "Already exists"})


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


@dataclass
class PullFollower:
    """Follows one pull stream; ``lines`` is what it printed (the same lines went to ``out``)."""

    out: TextIO
    every_s: float = PROGRESS_EVERY_S
    clock: Callable[[], float] = time.monotonic
    layers: dict[str, str] = field(default_factory=dict)  # layer id -> its last status
    sizes: dict[str, int] = field(default_factory=dict)  # layer id -> its download size, once announced
    downloaded: dict[str, int] = field(default_factory=dict)  # layer id -> bytes downloaded so far
    digest: str | None = None  # the stream's "Digest: sha256:..." line
    status: str | None = None  # the stream's last "Status: ..." line
    lines: list[str] = field(default_factory=list)
    _last: float | None = field(default=None, init=False)

    def say(self, line: str) -> None:
        self.lines.append(line)
        self.out.write(line + "\n")
        self.out.flush()

    def summary(self) -> str:
        done = sum(1 for s in self.layers.values() if s in _DONE)
        return (
            f"  layers {done}/{len(self.layers)} done, {_mb(sum(self.downloaded.values()))} of "
            f"{_mb(sum(self.sizes.values()))} downloaded"
        )

    def feed(self, event: Mapping[str, Any]) -> None:
        """One decoded line of Docker's pull stream."""
        if "error" in event or "errorDetail" in event:
            detail = event.get("errorDetail")
            message = detail.get("message") if isinstance(detail, Mapping) else None
            raise HitchError(
                "inference_runtime_unavailable",
                f"the pull failed: {str(message or event.get('error'))[:300]}",
                {"cause": str(event.get("error"))[:500]},
            )
        status = str(event.get("status") or "")
        layer = event.get("id")
        if status.startswith("Digest: "):
            self.digest = status.removeprefix("Digest: ").strip()
        elif status.startswith("Status: "):
            self.status = status.removeprefix("Status: ").strip()
        elif isinstance(layer, str) and not status.startswith("Pulling from"):
            self.layers[layer] = status
            progress = event.get("progressDetail")
            if status == "Downloading" and isinstance(progress, Mapping):
                total, current = progress.get("total"), progress.get("current")
                if isinstance(total, int) and total > 0:
                    self.sizes[layer] = total
                if isinstance(current, int):
                    self.downloaded[layer] = current
            elif status in ("Download complete", "Pull complete") and layer in self.sizes:
                self.downloaded[layer] = self.sizes[layer]
        now = self.clock()
        if self._last is None or now - self._last >= self.every_s:
            self._last = now
            self.say(self.summary())

    def follow(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            self.feed(event)
        self.say(self.summary())


@dataclass(frozen=True)
class PulledImage:
    reference: str
    digest: str  # the pinned digest, as found on the image
    image_id: str
    size_bytes: int | None
    layers: int

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mismatch(package: OciPackage, found: Any, where: str) -> HitchError:
    return HitchError(
        "inference_runtime_integrity_failed",
        f"the image pulled for {package.image} is not the pinned {package.digest} ({where}: {found}); it is not used",
        {"image": package.image, "expected": package.digest, "found": found, "where": where},
    )


def check_pulled_image(attrs: Mapping[str, Any], package: OciPackage, layers: int = 0) -> PulledImage:
    """``docker image inspect`` attributes of what arrived, checked against ``package``'s pinned digest."""
    pinned, image_id = package.digest, attrs.get("Id")
    if pinned is None or not isinstance(image_id, str):
        raise _mismatch(package, image_id, "image ID")
    if package.digest_source == "image_id":
        if image_id != pinned:
            raise _mismatch(package, image_id, "image ID")
    else:
        wanted = repository_of(package.image)
        found = [
            ref.split("@", 1)[1]
            for ref in attrs.get("RepoDigests") or []
            if isinstance(ref, str) and "@" in ref and repository_of(ref) == wanted
        ]
        if pinned not in found:
            raise _mismatch(package, found, "RepoDigests")
    size = attrs.get("Size")
    return PulledImage(package.reference(), pinned, image_id, size if isinstance(size, int) else None, layers)


def pull_image(
    manifest: InferenceRuntimeManifestV1,
    out: TextIO,
    *,
    stream: Iterable[Mapping[str, Any]] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> PulledImage:
    """Pull ``manifest``'s pinned image, showing its progress on ``out``, and check what arrived.

    ``stream``: Docker's pull stream when it was obtained elsewhere (tests feed recorded lines); by default
    ``APIClient.pull(..., stream=True, decode=True)`` of the pinned reference."""
    package = manifest.package
    assert isinstance(package, OciPackage) and package.digest is not None
    ref = package.reference()
    follower = PullFollower(out, clock=clock)
    follower.say(f"pulling {ref} ({package.platform})")
    if stream is not None:
        follower.follow(stream)
    else:
        try:
            client = docker_client()
        except HitchError as err:
            raise HitchError(
                "inference_runtime_unavailable",
                f"cannot pull {ref}: Docker is not reachable",
                {"runtime": manifest.name, "image": ref, "cause": err.message},
            ) from err
        try:
            follower.follow(
                client.api.pull(package.image, tag=package.digest, stream=True, decode=True, platform=package.platform)
            )
        except HitchError:
            raise
        except Exception as exc:  # the SDK raises many types; all mean "not available here"
            raise HitchError(
                "inference_runtime_unavailable",
                f"cannot pull {ref}: {type(exc).__name__}",
                {"runtime": manifest.name, "image": ref, "cause": str(exc)[:500]},
            ) from exc
        finally:
            client.close()
    if follower.digest is not None and package.digest_source != "image_id" and follower.digest != package.digest:
        raise _mismatch(package, follower.digest, "the pull's Digest line")
    pulled = check_pulled_image(inspect_image(ref), package, len(follower.layers))
    size = _mb(pulled.size_bytes) if pulled.size_bytes is not None else "size unknown"
    follower.say(f"pulled {ref}: {size}, image {pulled.image_id}")
    return pulled


def record_pull(root: HitchRoot, manifest: InferenceRuntimeManifestV1, pulled: PulledImage) -> Path:
    """Keep what arrived beside the runtime's recorded manifest."""
    path = root.digest_dir(root.runtimes, manifest.runtime_id) / "pulled.json"
    atomic_write_json(
        path, {"schema_version": "1", "runtime_id": manifest.runtime_id, **pulled.to_json_dict(), "pulled_at": time.time()}
    )
    return path
