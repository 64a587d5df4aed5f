"""The content-addressed model store (spec §7.2, DESIGN §4): import, resolve, verify, GC.

Layout under HITCH_ROOT: ``store/model-files/sha256/<hex>/`` (the checkpoint, what the
engine loads), ``store/models/sha256/<hex>/manifest.json`` (:class:`LocalModelManifestV1`),
``indexes/models/aliases.json``. References are ``local/ALIAS`` or ``local/sha256:<hex>``.
"""

from __future__ import annotations

from harness.store.aliases import (
    read_aliases,
    remove_alias,
    resolve_model,
    resolve_model_id,
    set_alias,
    validate_alias,
)
from harness.store.gc import GcPlan, plan_gc, run_gc
from harness.store.hashing import FileDigest, hash_file
from harness.store.importer import ImportResult, import_model
from harness.store.manifest import list_model_ids, manifest_path, model_files_dir, read_manifest, verify_model_files
from harness.store.progress import ImportProgress, RichImportProgress
from harness.store.start_check import (
    quarantined_at,
    quarantined_models,
    record_verification,
    verify_first_start,
    verify_or_quarantine,
)

__all__ = [
    "FileDigest",
    "GcPlan",
    "ImportProgress",
    "ImportResult",
    "RichImportProgress",
    "hash_file",
    "import_model",
    "list_model_ids",
    "manifest_path",
    "model_files_dir",
    "plan_gc",
    "quarantined_at",
    "quarantined_models",
    "read_aliases",
    "read_manifest",
    "record_verification",
    "remove_alias",
    "resolve_model",
    "resolve_model_id",
    "run_gc",
    "set_alias",
    "validate_alias",
    "verify_first_start",
    "verify_model_files",
    "verify_or_quarantine",
]
