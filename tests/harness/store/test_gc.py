"""GC: dry run deletes nothing; --apply deletes only unreferenced objects and leftovers,
never what an alias or an inference lock references."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.paths import HitchRoot, atomic_write_json
from harness.store import import_model, list_model_ids, model_files_dir, plan_gc, run_gc
from harness.store.aliases import ModelAliasIndexV1
from tests.harness.store.checkpoint_builder import write_checkpoint


def _three_models(tmp_path: Path, hroot: HitchRoot) -> tuple[str, str, str]:
    aliased = import_model(hroot, write_checkpoint(tmp_path / "a", seed=1), "aliased").model_id
    locked = import_model(hroot, write_checkpoint(tmp_path / "b", seed=2), "locked").model_id
    loose = import_model(hroot, write_checkpoint(tmp_path / "c", seed=3), "loose").model_id
    # "locked" keeps only its lock reference; "loose" loses its alias and has none.
    atomic_write_json(hroot.aliases_file, ModelAliasIndexV1(aliases={"aliased": aliased}).to_json_dict())
    lock_dir = hroot.sealed_locks / ("ab" * 32)
    lock_dir.mkdir(parents=True)
    (lock_dir / "lock.json").write_text(json.dumps({"schema_version": "1", "model_id": locked}))
    return aliased, locked, loose


def _snapshot(hroot: HitchRoot) -> list[str]:
    return sorted(str(p.relative_to(hroot.path)) for p in hroot.path.rglob("*") if "locks" not in p.parts)


def test_dry_run_deletes_nothing(tmp_path: Path, hroot: HitchRoot) -> None:
    aliased, locked, loose = _three_models(tmp_path, hroot)
    (hroot.staging / "import-dead").mkdir()
    before = _snapshot(hroot)
    plan = run_gc(hroot, apply=False)
    assert plan.unreferenced_models == [loose]
    assert plan.kept == {aliased: ["alias:aliased"], locked: [f"lock:sha256:{'ab' * 32}"]}
    assert plan.staging_leftovers == [str(hroot.staging / "import-dead")]
    assert plan.deleted == []
    assert _snapshot(hroot) == before


def test_apply_keeps_alias_and_lock_references(tmp_path: Path, hroot: HitchRoot) -> None:
    aliased, locked, loose = _three_models(tmp_path, hroot)
    (hroot.staging / "import-dead" / "files").mkdir(parents=True)
    plan = run_gc(hroot, apply=True)
    assert loose in plan.deleted
    assert list_model_ids(hroot) == sorted([aliased, locked])
    for model_id in (aliased, locked):
        assert (model_files_dir(hroot, model_id) / "model.safetensors").is_file()
    assert not model_files_dir(hroot, loose).exists()
    assert not (hroot.models / loose.split(":")[1]).exists()
    assert list(hroot.staging.iterdir()) == []
    assert run_gc(hroot, apply=True).deleted == []


def test_unreadable_lock_blocks_model_deletion(tmp_path: Path, hroot: HitchRoot) -> None:
    _, _, loose = _three_models(tmp_path, hroot)
    bad = hroot.sealed_locks / ("cd" * 32)
    bad.mkdir(parents=True)
    (bad / "lock.json").write_text("{truncated")
    plan = run_gc(hroot, apply=True)
    assert plan.unreadable_locks == [str(bad / "lock.json")]
    assert plan.unreferenced_models == []
    assert loose in list_model_ids(hroot)


def test_half_published_files_are_collected_and_replaced(tmp_path: Path, checkpoint: Path, hroot: HitchRoot) -> None:
    model_id = import_model(hroot, checkpoint, "m").model_id
    files = model_files_dir(hroot, model_id)
    # Simulate a publish that died between the files rename and the manifest write.
    shutil.rmtree(hroot.models / model_id.split(":")[1])
    assert plan_gc(hroot).orphan_model_files == [model_id]
    again = import_model(hroot, checkpoint, "m")
    assert again.model_id == model_id and not again.already_present
    assert (files / "config.json").read_bytes() == (checkpoint / "config.json").read_bytes()
    shutil.rmtree(hroot.models / model_id.split(":")[1])
    assert model_id in run_gc(hroot, apply=True).deleted
    assert not files.exists()


def test_live_staging_dir_is_not_a_leftover(hroot: HitchRoot) -> None:
    from harness.store.staging import StagingDir

    with StagingDir(hroot) as stage:
        assert plan_gc(hroot).staging_leftovers == []
        assert run_gc(hroot, apply=True).deleted == []
        assert stage.files.is_dir()
    assert list(hroot.staging.iterdir()) == []
