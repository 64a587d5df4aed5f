"""model_id is content identity: alias, source path and import time never change it;
one changed byte in any file always does."""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.paths import HitchRoot
from harness.store import import_model
from tests.harness.store.checkpoint_builder import write_checkpoint

ALIASES = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,63}", fullmatch=True)
DIR_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=20)
FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"]
_SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _mutable_offsets(path: Path) -> list[int]:
    """Byte offsets whose change keeps the file valid: tensor data, or JSON whitespace."""
    raw = path.read_bytes()
    if path.suffix == ".safetensors":
        (n,) = struct.unpack("<Q", raw[:8])
        return list(range(8 + n, len(raw)))
    offsets: list[int] = []
    in_string = escaped = False
    for i, b in enumerate(raw):  # whitespace between JSON tokens, never inside a string
        if in_string:
            if escaped:
                escaped = False
            elif b == ord("\\"):
                escaped = True
            elif b == ord('"'):
                in_string = False
        elif b == ord('"'):
            in_string = True
        elif b in b" \n":
            offsets.append(i)
    return offsets


@_SETTINGS
@given(alias_a=ALIASES, alias_b=ALIASES, dir_a=DIR_NAMES, dir_b=DIR_NAMES)
def test_same_bytes_same_id(alias_a: str, alias_b: str, dir_a: str, dir_b: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        original = write_checkpoint(base / "orig")
        copy_a = shutil.copytree(original, base / "a" / dir_a)
        copy_b = shutil.copytree(original, base / "b" / "nested" / dir_b)
        id_a = import_model(HitchRoot(base / "root-a"), copy_a, alias_a).model_id
        id_b = import_model(HitchRoot(base / "root-b"), copy_b, alias_b).model_id
        assert id_a == id_b


@_SETTINGS
@given(file_name=st.sampled_from(FILES), where=st.floats(min_value=0, max_value=1, exclude_max=True), data=st.data())
def test_one_changed_byte_changes_id(file_name: str, where: float, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        original = write_checkpoint(base / "orig")
        changed = shutil.copytree(original, base / "changed")
        target = changed / file_name
        offsets = _mutable_offsets(target)
        offset = offsets[int(where * len(offsets))]
        raw = bytearray(target.read_bytes())
        if target.suffix == ".safetensors":
            raw[offset] ^= data.draw(st.integers(min_value=1, max_value=255))
        else:
            raw[offset] = ord("\t") if raw[offset] == ord(" ") else ord(" ")
        target.write_bytes(bytes(raw))
        root = HitchRoot(base / "root")
        before = import_model(root, original, "same-alias")
        after = import_model(root, changed, "same-alias")
        assert after.model_id != before.model_id
        changed_entries = {f.path for f in after.manifest.files} ^ {f.path for f in before.manifest.files}
        assert not changed_entries
        differing = [a.path for a, b in zip(after.manifest.files, before.manifest.files, strict=True) if a != b]
        assert differing == [file_name]
