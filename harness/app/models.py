"""The models a run or a certification names: a checkpoint imported once into a root, and its identity."""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock

from harness.paths import HitchRoot, ensure_private_dir
from harness.store import import_model, resolve_model

__all__ = ["import_once", "model_id_of"]


def import_once(root: HitchRoot, source: Path, alias: str) -> str:
    """Import the checkpoint ``source`` under ``alias`` (idempotent: the same files are the same model); processes
    that import at once (a certify session's xdist workers) take turns. Returns the reference ``local/<alias>``."""
    with FileLock(str(ensure_private_dir(root.mutexes) / "model-import.lock")):
        import_model(root, source, alias)
    return f"local/{alias}"


def model_id_of(root: HitchRoot, ref: str) -> str:
    """The ``model_id`` a reference (``local/ALIAS``, ``local/sha256:<hex>``) names in ``root``."""
    return resolve_model(root, ref).model_id
