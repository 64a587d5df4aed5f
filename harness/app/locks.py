"""Locks as an entry point reads and keeps them (certify's options, session and reproduction; the perf stack):
a sealed lock by id, a lock document checked, a lock kept as sealed, a draft lock of a checkpoint, a generation
profile by name or file, a runtime by name.

The core's own functions (:mod:`harness.lock`, :mod:`harness.runtimes`, :mod:`harness.store`) do the work; these
are what an entry point above the app layer calls instead of reaching below it.

Example::

    lock = sealed_lock(root, "sha256:...")  # inference_lock_mismatch when not sealed here
    profile = generation_profile("balanced")  # usage_error (did-you-mean) when unknown
    draft = draft_lock(root, Path("ckpt"), "bench", "sglang-0.5.23-cpu-generic", device="cpu", profile="baseline",
                       cpu_cores_per_node=2, context_tokens=2048)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.contracts.lock import InferenceLockV1
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.lock import (
    GenerationProfile,
    ProfileShort,
    build_lock,
    generation_profile,
    load_sealed_lock,
    save_sealed_lock,
    validate_lock,
)
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.store import import_model

__all__ = [
    "GenerationProfile",
    "ProfileShort",
    "draft_lock",
    "generation_profile",
    "keep_sealed_lock",
    "lock_from_json",
    "runtime_named",
    "sealed_lock",
]


def sealed_lock(root: HitchRoot, inference_id: str) -> InferenceLockV1:
    """The lock sealed in ``root`` under ``inference_id``."""
    return load_sealed_lock(root, inference_id)


def lock_from_json(data: Any) -> InferenceLockV1:
    """A lock document strictly parsed (``inference_lock_invalid`` when its content is not its id)."""
    return validate_lock(data)


def keep_sealed_lock(root: HitchRoot, lock: InferenceLockV1, validation: dict[str, Any]) -> None:
    """Keep ``lock`` in ``root`` as sealed, with the record of how it was validated."""
    save_sealed_lock(root, lock, validation)


def runtime_named(name_or_runtime_id: str) -> InferenceRuntimeManifestV1:
    """The catalog's runtime of this name or runtime_id (``inference_runtime_unavailable`` when none)."""
    return get_runtime(name_or_runtime_id)


def draft_lock(root: HitchRoot, source: Path, alias: str, runtime: str, **lock_args: Any) -> InferenceLockV1:
    """The draft lock of the checkpoint ``source``, imported into ``root`` under ``alias``, on ``runtime``
    (``lock_args``: :func:`harness.lock.build_lock`'s device, profile, cores, context, benchmark)."""
    manifest = import_model(root, source, alias).manifest
    return build_lock(manifest, get_runtime(runtime), **lock_args)
