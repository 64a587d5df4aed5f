"""A lock's first start re-hashes its model's files; a corrupt model object is quarantined (spec §7.2, §12.2).

**First start.** A lock starts "for the first time" in a root until a start of it there followed a successful
re-hash of its model's files: :func:`record_verification` then writes the marker
``store/model-verifications/sha256/<model hex>/<inference hex>.json``, and every later start of that lock skips
the re-hash (:func:`verify_first_start` answers ``False``). ``local prepare`` re-hashes before its probe and marks
the lock it seals; ``hitch run`` (``POST /v1/runs``) re-hashes a lock that has no marker before anything starts.
The marker is this root's alone (certify's private roots copy sealed locks, never markers), and it goes with
the model object: a quarantine or a GC of the model removes its markers, so a re-imported object is re-hashed at
its locks' next start.

**Quarantine.** A file that no longer matches the manifest (changed, missing, extra, become a symlink) refuses the
start with ``local_model_integrity_failed`` and, under the model's mutex, unpublishes the object: its manifest and
files move to ``store/quarantine/sha256/<model hex>/<ns>/`` with ``reason.json`` (the file, the digests). The
model is then unusable — resolving it answers ``local_model_integrity_failed`` naming that folder — until the same
checkpoint is imported again (``hitch models add DIR --name ALIAS``), which publishes a fresh, verified copy; the
quarantined folder stays as evidence until the operator deletes it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from harness.contracts.model import LocalModelManifestV1
from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_json
from harness.store.manifest import manifest_path, model_files_dir, read_manifest, verify_model_files
from harness.store.staging import model_mutex, remove_tree

__all__ = [
    "quarantine_model",
    "quarantined_at",
    "quarantined_models",
    "record_verification",
    "verification_marker",
    "verify_first_start",
    "verify_or_quarantine",
]


def verification_marker(root: HitchRoot, model_id: str, inference_id: str) -> Path:
    """Where a start of ``inference_id`` records that it re-hashed ``model_id``'s files."""
    return root.digest_dir(root.model_verifications, model_id) / f"{inference_id.split(':', 1)[1]}.json"


def record_verification(root: HitchRoot, model_id: str, inference_id: str) -> Path:
    """Mark ``inference_id``'s first start done: its model's files were re-hashed and matched."""
    marker = verification_marker(root, model_id, inference_id)
    marker.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        marker, {"schema_version": "1", "model_id": model_id, "inference_id": inference_id, "verified_at": time.time()}
    )
    return marker


def quarantined_at(root: HitchRoot, model_id: str) -> Path | None:
    """The newest quarantine folder of ``model_id`` in this root, if it was ever quarantined."""
    base = root.digest_dir(root.quarantine, model_id)
    found = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    return found[-1] if found else None


def quarantined_models(root: HitchRoot) -> dict[str, Path]:
    """Each quarantined model not imported again since (no published manifest) -> its newest quarantine folder."""
    if not root.quarantine.is_dir():
        return {}
    found = {f"sha256:{entry.name}": quarantined_at(root, f"sha256:{entry.name}") for entry in sorted(root.quarantine.iterdir())}
    return {m: where for m, where in found.items() if where is not None and not manifest_path(root, m).is_file()}


def quarantine_model(root: HitchRoot, manifest: LocalModelManifestV1, reason: HitchError) -> Path:
    """Unpublish ``manifest``'s object (manifest first, then its files) into a quarantine folder; returns it.

    The caller holds the model's mutex."""
    model_id = manifest.model_id
    target = root.digest_dir(root.quarantine, model_id) / str(time.time_ns())
    target.mkdir(parents=True)
    why = {"code": reason.code, "message": reason.message, "details": reason.details, "quarantined_at": time.time()}
    atomic_write_json(target / "reason.json", {"schema_version": "1", "model_id": model_id, **why})
    mpath, files = manifest_path(root, model_id), model_files_dir(root, model_id)
    if mpath.is_file():  # unpublished first: a reader never sees a manifest whose files are gone
        os.rename(mpath, target / "manifest.json")
    else:
        (target / "manifest.json").write_text(json.dumps(manifest.to_json_dict()))
    if files.is_dir() or files.is_symlink():
        os.rename(files, target / "files")
    remove_tree(root.digest_dir(root.model_verifications, model_id))
    return target


def verify_or_quarantine(root: HitchRoot, manifest: LocalModelManifestV1) -> None:
    """Re-hash the published files; on any mismatch quarantine the object and raise ``local_model_integrity_failed``
    naming the file and where the object went."""
    with model_mutex(root, manifest.model_id):
        try:
            verify_model_files(root, manifest)
        except HitchError as err:
            if err.code != "local_model_integrity_failed":
                raise
            where = quarantine_model(root, manifest, err)
            raise HitchError(
                "local_model_integrity_failed",
                f"{err.message}: model {manifest.model_id} was quarantined to {where}; nothing was started. "
                "Import the same checkpoint again (`hitch models add DIR --name ALIAS`) to use it",
                {**err.details, "model_id": manifest.model_id, "quarantined": str(where)},
            ) from err


def verify_first_start(root: HitchRoot, model_id: str, inference_id: str) -> bool:
    """Before a start of ``inference_id``: re-hash ``model_id``'s files unless a start of this lock already did
    (its marker); True when they were re-hashed now. A mismatch quarantines the object and raises."""
    if verification_marker(root, model_id, inference_id).is_file():
        return False
    verify_or_quarantine(root, read_manifest(root, model_id))
    record_verification(root, model_id, inference_id)
    return True
