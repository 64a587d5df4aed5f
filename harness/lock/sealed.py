"""Sealed locks: what ``local prepare`` saved in a root, and how a later start finds it again.

``store/inference-locks/sha256/<inference hex>/`` holds ``lock.json`` (the sealed :class:`InferenceLockV1`) and
``validation.json`` (the draft it was sealed from, the probed values, the readiness record), each written
atomically. A draft whose probe yielded other numbers is sealed under a new inference id; its validation names
the draft (``draft_inference_id``), so :func:`sealed_for_draft` finds the sealed lock of a draft.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.lock.build import validate_lock
from harness.paths import HitchRoot, atomic_write_json

__all__ = ["load_sealed_lock", "save_sealed_lock", "sealed_for_draft"]


def load_sealed_lock(root: HitchRoot, inference_id: str) -> InferenceLockV1:
    """A lock ``local prepare`` sealed in this root (``store/inference-locks/sha256/<hex>/lock.json``)."""
    if not inference_id.startswith("sha256:"):
        raise HitchError("usage_error", "an inference id is sha256:<hex>", {"inference_id": inference_id})
    path = root.digest_dir(root.sealed_locks, inference_id) / "lock.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise HitchError(
            "inference_lock_mismatch", f"{inference_id} is not prepared in this root", {"inference_id": inference_id}
        ) from None
    except (OSError, ValueError) as exc:
        raise HitchError("inference_lock_invalid", f"cannot read {path}", {"path": str(path)}) from exc
    lock = validate_lock(data)
    if lock.inference_id != inference_id:
        raise HitchError("inference_lock_invalid", "the stored lock names another inference id", {"path": str(path)})
    return lock


def save_sealed_lock(root: HitchRoot, lock: InferenceLockV1, validation: dict[str, Any]) -> tuple[Path, Path]:
    """Save a sealed lock and its validation record; returns their paths."""
    folder = root.digest_dir(root.sealed_locks, lock.inference_id)
    lock_path, validation_path = folder / "lock.json", folder / "validation.json"
    atomic_write_json(lock_path, lock.to_json_dict())
    atomic_write_json(validation_path, validation)
    return lock_path, validation_path


def sealed_for_draft(root: HitchRoot, draft_id: str) -> str | None:
    """The sealed inference id prepared from this draft lock: itself, or the newest lock sealed from its probe."""
    if (root.digest_dir(root.sealed_locks, draft_id) / "lock.json").is_file():
        return draft_id
    if not root.sealed_locks.is_dir():
        return None
    found: list[tuple[float, str]] = []
    for validation in root.sealed_locks.glob("*/validation.json"):
        try:
            data = json.loads(validation.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("draft_inference_id") == draft_id and (validation.parent / "lock.json").is_file():
            sealed, at = data.get("inference_id"), data.get("validated_at")
            if isinstance(sealed, str):
                found.append((at if isinstance(at, int | float) else 0.0, sealed))
    return max(found)[1] if found else None
