"""Importing checkpoints: what gets published, aliases, and failures mid-import
(source changed, disk full, interrupt) that must leave nothing behind."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from harness.contracts.base import parse_record
from harness.contracts.model import LocalModelManifestV1, compute_model_id
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.store import (
    hash_file,
    hashing,
    import_model,
    importer,
    list_model_ids,
    manifest_path,
    model_files_dir,
    read_aliases,
    resolve_model,
)
from tests.harness.store.conftest import assert_nothing_published


def test_import_publishes_files_and_manifest(checkpoint: Path, hroot: HitchRoot) -> None:
    result = import_model(hroot, checkpoint, "coder")
    assert not result.already_present and result.previous_model_id is None
    files_dir = model_files_dir(hroot, result.model_id)
    assert files_dir == result.files_dir
    source_files = sorted(p.name for p in checkpoint.iterdir())
    assert sorted(p.name for p in files_dir.iterdir()) == source_files
    for name in source_files:
        assert (files_dir / name).read_bytes() == (checkpoint / name).read_bytes()
        assert not stat.S_IMODE((files_dir / name).stat().st_mode) & 0o222  # published files are read-only
    stored = json.loads(manifest_path(hroot, result.model_id).read_text())
    manifest = parse_record(LocalModelManifestV1, stored, "internal_error")
    assert manifest == result.manifest
    assert manifest.model_id == compute_model_id(stored)
    assert [f.path for f in manifest.files] == source_files
    entry = next(f for f in manifest.files if f.path == "model.safetensors")
    assert entry.sha256 == hash_file(checkpoint / "model.safetensors").sha256_id
    assert manifest.architecture.architectures == ["LlamaForCausalLM"]
    assert manifest.architecture.torch_dtype == "float32"
    assert manifest.architecture.quantization is None
    assert manifest.weights.shards == ["model.safetensors"] and manifest.weights.tensor_count == 3
    assert manifest.chat_template.source == "tokenizer_config.json"
    assert manifest.generation_config_sha256 is not None
    assert read_aliases(hroot) == {"coder": result.model_id}
    assert resolve_model(hroot, "local/coder") == manifest
    assert resolve_model(hroot, f"local/{result.model_id}") == manifest
    assert list(hroot.staging.iterdir()) == []


def test_sharded_checkpoint_and_quantization(sharded_checkpoint: Path, hroot: HitchRoot) -> None:
    config = json.loads((sharded_checkpoint / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (sharded_checkpoint / "config.json").write_text(json.dumps(config))
    (sharded_checkpoint / "chat_template.jinja").write_text("{{ messages }}")
    manifest = import_model(hroot, sharded_checkpoint, "sharded").manifest
    assert manifest.weights.index_file == "model.safetensors.index.json"
    assert manifest.weights.shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert manifest.architecture.quantization == "fp8"
    assert manifest.chat_template.source == "chat_template.jinja"


def test_reimport_and_repoint_alias(tmp_path: Path, checkpoint: Path, hroot: HitchRoot) -> None:
    from tests.harness.store.checkpoint_builder import write_checkpoint

    first = import_model(hroot, checkpoint, "coder")
    again = import_model(hroot, checkpoint, "coder")
    assert again.already_present and again.model_id == first.model_id and again.previous_model_id == first.model_id
    other = import_model(hroot, write_checkpoint(tmp_path / "other", seed=7), "coder")
    assert other.model_id != first.model_id and other.previous_model_id == first.model_id
    assert read_aliases(hroot) == {"coder": other.model_id}
    assert list_model_ids(hroot) == sorted([first.model_id, other.model_id])


def test_unknown_refs(hroot: HitchRoot) -> None:
    for ref in ("local/nope", "local/sha256:" + "0" * 64, "nope", "local/sha256:xyz"):
        with pytest.raises(HitchError) as info:
            resolve_model(hroot, ref)
        assert info.value.code == "local_model_not_found"


# --- the source changes while it is imported ---------------------------------------------


def _age(ckpt: Path) -> None:
    # Old mtimes, as real checkpoints have: a write during the import then surely changes mtime.
    for path in ckpt.iterdir():
        os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))


def _flip_data_byte(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        last = fh.read(1)
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([last[0] ^ 0xFF]))


@pytest.mark.parametrize(
    "change",
    ["flip_byte_same_size", "append", "add_file", "remove_file", "replace_file"],
)
def test_source_changed_during_import(change: str, checkpoint: Path, hroot: HitchRoot) -> None:
    _age(checkpoint)
    target = checkpoint / "model.safetensors"

    def hook(rel: str) -> None:
        if rel != "model.safetensors":  # change a file that has already been copied
            return
        if change == "flip_byte_same_size":
            _flip_data_byte(target)
        elif change == "append":
            with open(target, "ab") as fh:
                fh.write(b"\0")
        elif change == "add_file":
            (checkpoint / "added.json").write_text("{}")
        elif change == "remove_file":
            (checkpoint / "generation_config.json").unlink()
        else:
            tmp = checkpoint / "new.tmp"
            tmp.write_bytes(target.read_bytes())
            os.replace(tmp, target)

    size_before = target.stat().st_size
    with pytest.raises(HitchError) as info:
        import_model(hroot, checkpoint, "m", on_file_copied=hook)
    assert info.value.code == "local_model_source_changed"
    assert_nothing_published(hroot)
    if change == "flip_byte_same_size":
        assert target.stat().st_size == size_before


# --- storage failures ---------------------------------------------------------------------


def _failing_copy(exc: BaseException, after_files: int) -> Any:
    real = hashing.copy_and_hash
    calls = {"n": 0}

    def copy(src: BinaryIO, dst: BinaryIO, **kwargs: Any) -> hashing.FileDigest:
        calls["n"] += 1
        if calls["n"] > after_files:
            dst.write(src.read(3))  # a partial file in staging, like a real short write
            raise exc
        return real(src, dst, **kwargs)

    return copy


@pytest.mark.parametrize(
    ("exc", "after_files", "detail"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), 2, ("errno", "ENOSPC")),
        (KeyboardInterrupt(), 1, ("reason", "interrupted")),
    ],
    ids=["disk_full", "keyboard_interrupt"],
)
def test_a_failure_mid_copy_publishes_nothing(
    monkeypatch: pytest.MonkeyPatch,
    checkpoint: Path,
    hroot: HitchRoot,
    exc: BaseException,
    after_files: int,
    detail: tuple[str, str],
) -> None:
    monkeypatch.setattr(hashing, "copy_and_hash", _failing_copy(exc, after_files))
    with pytest.raises(HitchError) as info:
        import_model(hroot, checkpoint, "m")
    assert info.value.code == "storage_write_failed"
    assert info.value.details[detail[0]] == detail[1]
    assert_nothing_published(hroot)


def test_disk_full_writing_manifest(monkeypatch: pytest.MonkeyPatch, checkpoint: Path, hroot: HitchRoot) -> None:
    def full(*_: Any, **__: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(importer, "atomic_write_json", full)
    with pytest.raises(HitchError) as info:
        import_model(hroot, checkpoint, "m")
    assert info.value.code == "storage_write_failed"
    assert_nothing_published(hroot)


def test_staged_copy_mismatch_is_storage_failure(monkeypatch: pytest.MonkeyPatch, checkpoint: Path, hroot: HitchRoot) -> None:
    real = hashing.hash_file
    monkeypatch.setattr(hashing, "hash_file", lambda p, **k: hashing.FileDigest(real(p, **k).size, "0" * 64))
    with pytest.raises(HitchError) as info:
        import_model(hroot, checkpoint, "m")
    assert info.value.code == "storage_write_failed"
    assert_nothing_published(hroot)


def test_tool_metadata_dirs_ignored_hidden_files_kept(checkpoint: Path, hroot: HitchRoot) -> None:
    (checkpoint / ".git").mkdir()
    (checkpoint / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (checkpoint / ".cache" / "huggingface").mkdir(parents=True)
    (checkpoint / ".cache" / "huggingface" / "download.metadata").write_text("etag, time")
    (checkpoint / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    manifest = import_model(hroot, checkpoint, "m").manifest
    paths = [f.path for f in manifest.files]
    assert ".gitattributes" in paths
    assert not [p for p in paths if p.startswith((".git/", ".cache/"))]
