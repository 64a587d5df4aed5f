"""Every refused checkpoint: the stable error code, and nothing published (no manifest,
no model-files object, no alias, empty staging)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.store import import_model
from tests.harness.store.conftest import assert_nothing_published

Mutation = Callable[[Path], None]


def _write_json(path: Path, update: dict[str, object]) -> None:
    data = json.loads(path.read_text())
    data.update(update)
    path.write_text(json.dumps(data))


def _drop_template(ckpt: Path) -> None:
    data = json.loads((ckpt / "tokenizer_config.json").read_text())
    del data["chat_template"]
    (ckpt / "tokenizer_config.json").write_text(json.dumps(data))


def _corrupt_header(ckpt: Path) -> None:
    raw = bytearray((ckpt / "model.safetensors").read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    raw[8 + n - 2] = ord("#")  # breaks the JSON inside the header, size unchanged
    (ckpt / "model.safetensors").write_bytes(bytes(raw))


def _truncate_data(ckpt: Path) -> None:
    raw = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(raw[:-4])


SINGLE_FILE_CASES: dict[str, Mutation] = {
    "pytorch_bin": lambda c: (c / "pytorch_model.bin").write_bytes(b"\x80\x02pickle"),
    "pt_in_subdir": lambda c: ((c / "original").mkdir(), (c / "original" / "consolidated.pt").write_bytes(b"x")),
    "pkl": lambda c: (c / "optimizer.pkl").write_bytes(b"x"),
    "pth": lambda c: (c / "weights.pth").write_bytes(b"x"),
    "ckpt": lambda c: (c / "model.ckpt").write_bytes(b"x"),
    "python_file": lambda c: (c / "modeling_custom.py").write_text("import os\n"),
    "python_file_upper": lambda c: (c / "Tokenizer.PY").write_text("x = 1\n"),
    "auto_map_config": lambda c: _write_json(c / "config.json", {"auto_map": {"AutoModel": "m.M"}}),
    "auto_map_tokenizer_config": lambda c: _write_json(
        c / "tokenizer_config.json", {"auto_map": {"AutoTokenizer": ["t.T", None]}}
    ),
    "trust_remote_code_nested": lambda c: _write_json(c / "config.json", {"text_config": {"trust_remote_code": True}}),
    "trust_remote_code_generation": lambda c: _write_json(c / "generation_config.json", {"trust_remote_code": True}),
    "absolute_symlink": lambda c: (c / "extra.json").symlink_to("/etc/hostname"),
    "escaping_symlink": lambda c: (c / "escape.txt").symlink_to("../outside.txt"),
    "missing_config": lambda c: (c / "config.json").unlink(),
    "missing_tokenizer": lambda c: (c / "tokenizer.json").unlink(),
    "missing_tokenizer_config": lambda c: (c / "tokenizer_config.json").unlink(),
    "missing_chat_template": _drop_template,
    "missing_weights": lambda c: (c / "model.safetensors").unlink(),
    "corrupt_safetensors_header": _corrupt_header,
    "safetensors_offsets_out_of_bounds": _truncate_data,
    "config_not_json": lambda c: (c / "config.json").write_text("{not json"),
    "config_without_architectures": lambda c: _write_json(c / "config.json", {"architectures": []}),
    "fifo": lambda c: os.mkfifo(c / "pipe"),
}


@pytest.mark.parametrize("case", sorted(SINGLE_FILE_CASES))
def test_rejected_checkpoint(case: str, checkpoint: Path, hroot: HitchRoot) -> None:
    (checkpoint.parent / "outside.txt").write_text("outside")
    SINGLE_FILE_CASES[case](checkpoint)
    with pytest.raises(HitchError) as info:
        import_model(hroot, checkpoint, "m")
    assert info.value.code == "local_model_invalid", info.value.message
    assert_nothing_published(hroot)


def _edit_weight_map(ckpt: Path, edit: Callable[[dict[str, str]], dict[str, str]]) -> None:
    path = ckpt / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    index["weight_map"] = edit(index["weight_map"])
    path.write_text(json.dumps(index))


def _index_references_missing_shard(ckpt: Path) -> None:
    _edit_weight_map(ckpt, lambda m: {**m, "lm_head.weight": "model-00003-of-00002.safetensors"})


def _index_misses_a_shard(ckpt: Path) -> None:
    _edit_weight_map(ckpt, lambda m: {k: v for k, v in m.items() if v.startswith("model-00001")})


def _index_maps_absent_tensor(ckpt: Path) -> None:
    _edit_weight_map(ckpt, lambda m: {**m, "model.norm.weight": "model-00002-of-00002.safetensors"})


def _index_maps_tensor_to_wrong_shard(ckpt: Path) -> None:
    _edit_weight_map(ckpt, lambda m: {**m, "lm_head.weight": "model-00001-of-00002.safetensors"})


SHARDED_CASES: dict[str, Mutation] = {
    "index_references_missing_shard": _index_references_missing_shard,
    "shard_not_referenced": _index_misses_a_shard,
    "index_tensor_absent_from_shard": _index_maps_absent_tensor,
    "index_tensor_in_other_shard": _index_maps_tensor_to_wrong_shard,
    "index_missing_with_shards": lambda c: (c / "model.safetensors.index.json").unlink(),
    "index_without_weight_map": lambda c: (c / "model.safetensors.index.json").write_text("{}"),
    "shard_header_corrupt": lambda c: (c / "model-00002-of-00002.safetensors").write_bytes(b"\xff" * 16),
}


@pytest.mark.parametrize("case", sorted(SHARDED_CASES))
def test_rejected_sharded_checkpoint(case: str, sharded_checkpoint: Path, hroot: HitchRoot) -> None:
    SHARDED_CASES[case](sharded_checkpoint)
    with pytest.raises(HitchError) as info:
        import_model(hroot, sharded_checkpoint, "m")
    assert info.value.code == "local_model_invalid", info.value.message
    assert_nothing_published(hroot)


def test_not_a_directory(tmp_path: Path, checkpoint: Path, hroot: HitchRoot) -> None:
    for src in (checkpoint / "model.safetensors", tmp_path / "does-not-exist"):
        with pytest.raises(HitchError) as info:
            import_model(hroot, src, "m")
        assert info.value.code == "local_model_invalid"
        assert_nothing_published(hroot)


@pytest.mark.parametrize("alias", ["", "Upper", "-lead", "a b", "x" * 65, "local/x", "../x"])
def test_invalid_alias(alias: str, checkpoint: Path, hroot: HitchRoot) -> None:
    with pytest.raises(HitchError) as info:
        import_model(hroot, checkpoint, alias)
    assert info.value.code == "local_model_alias_invalid"
    assert_nothing_published(hroot)


def test_relative_symlink_inside_is_imported_as_its_bytes(checkpoint: Path, hroot: HitchRoot) -> None:
    (checkpoint / "docs").mkdir()
    (checkpoint / "docs" / "README.md").write_text("readme")
    (checkpoint / "README.md").symlink_to("docs/README.md")
    result = import_model(hroot, checkpoint, "m")
    published = result.files_dir / "README.md"
    assert not published.is_symlink()
    assert published.read_text() == "readme"
