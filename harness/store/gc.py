"""Garbage collection of the model store: dry-run by default, ``apply`` to delete.

Candidates: published models no alias and no inference lock references; model-files
directories without a manifest (a publish that died half-way); empty manifest
directories; staging directories no live import holds. A model an alias or a lock
(``store/inference-locks/sha256/<hex>/lock.json``, field ``model_id``) references is
never deleted. If any lock file cannot be read, no model is deleted (fail closed).
Each deletion re-checks references under the model's lock, then unpublishes (manifest
first) before removing the files.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.ids import is_sha256_id
from harness.paths import HitchRoot
from harness.store.aliases import read_aliases
from harness.store.manifest import list_model_ids, manifest_path, model_files_dir
from harness.store.staging import model_mutex, remove_tree, staging_leftovers

__all__ = ["GcPlan", "ModelReferences", "collect_references", "plan_gc", "run_gc"]


@dataclass
class ModelReferences:
    by_alias: dict[str, list[str]] = field(default_factory=dict)  # model_id -> aliases
    by_lock: dict[str, list[str]] = field(default_factory=dict)  # model_id -> lock digests
    unreadable_locks: list[str] = field(default_factory=list)

    def reasons(self, model_id: str) -> list[str]:
        return [f"alias:{a}" for a in self.by_alias.get(model_id, [])] + [
            f"lock:{lock}" for lock in self.by_lock.get(model_id, [])
        ]


def collect_references(root: HitchRoot) -> ModelReferences:
    refs = ModelReferences()
    for alias, model_id in sorted(read_aliases(root).items()):
        refs.by_alias.setdefault(model_id, []).append(alias)
    if root.sealed_locks.is_dir():
        for entry in sorted(root.sealed_locks.iterdir()):
            lock_file = entry / "lock.json"
            try:
                model_id = json.loads(lock_file.read_bytes()).get("model_id")
            except FileNotFoundError:
                continue
            except (OSError, ValueError, AttributeError):
                refs.unreadable_locks.append(str(lock_file))
                continue
            if not isinstance(model_id, str) or not is_sha256_id(model_id):
                refs.unreadable_locks.append(str(lock_file))
                continue
            refs.by_lock.setdefault(model_id, []).append(f"sha256:{entry.name}")
    return refs


@dataclass
class GcPlan:
    unreferenced_models: list[str]
    orphan_model_files: list[str]  # model ids whose files have no manifest
    empty_manifest_dirs: list[str]
    staging_leftovers: list[str]
    kept: dict[str, list[str]]  # model_id -> why it is kept
    unreadable_locks: list[str]
    deleted: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self) | {"kept": [{"model_id": m, "reasons": r} for m, r in sorted(self.kept.items())]}


def _ids_in(base: Path) -> set[str]:
    if not base.is_dir():
        return set()
    return {f"sha256:{e.name}" for e in base.iterdir() if is_sha256_id(f"sha256:{e.name}")}


def plan_gc(root: HitchRoot) -> GcPlan:
    refs = collect_references(root)
    published = list_model_ids(root)
    kept = {m: refs.reasons(m) for m in published if refs.reasons(m)}
    if refs.unreadable_locks:
        for m in published:
            kept.setdefault(m, ["unreadable inference lock: cannot prove it unreferenced"])
    return GcPlan(
        unreferenced_models=[m for m in published if m not in kept],
        orphan_model_files=sorted(_ids_in(root.model_files) - set(published)),
        empty_manifest_dirs=sorted(_ids_in(root.models) - set(published)),
        staging_leftovers=[str(p) for p in staging_leftovers(root)],
        kept=kept,
        unreadable_locks=refs.unreadable_locks,
    )


def _delete_model(root: HitchRoot, model_id: str, only_if_unpublished: bool) -> bool:
    with model_mutex(root, model_id):
        mpath = manifest_path(root, model_id)
        if only_if_unpublished:
            if mpath.exists():
                return False
        else:
            refs = collect_references(root)  # re-read under the lock: an import may just have aliased it
            if refs.reasons(model_id) or refs.unreadable_locks:
                return False
            mpath.unlink(missing_ok=True)  # unpublish first: readers never see a manifest without files
        remove_tree(mpath.parent)
        remove_tree(model_files_dir(root, model_id))
        remove_tree(root.digest_dir(root.model_verifications, model_id))  # a re-import is re-hashed at its next start
    return True


def run_gc(root: HitchRoot, *, apply: bool) -> GcPlan:
    """The plan; with ``apply`` its candidates are deleted (``deleted`` lists what went)."""
    plan = plan_gc(root)
    if not apply:
        return plan
    for model_id in plan.unreferenced_models:
        if _delete_model(root, model_id, only_if_unpublished=False):
            plan.deleted.append(model_id)
    for model_id in sorted(set(plan.orphan_model_files) | set(plan.empty_manifest_dirs)):
        if _delete_model(root, model_id, only_if_unpublished=True):
            plan.deleted.append(model_id)
    for path in staging_leftovers(root):
        remove_tree(path)
        plan.deleted.append(str(path))
    return plan
