"""Header parsing of safetensors files: valid files pass, every corruption is local_model_invalid."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from harness.errors import HitchError
from harness.store.safetensors_check import MAX_HEADER_BYTES, read_safetensors_header


def _raw(path: Path, header: object, data: bytes, *, length: int | None = None) -> Path:
    body = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path.write_bytes(struct.pack("<Q", len(body) if length is None else length) + body + data)
    return path


def _rejects(path: Path) -> HitchError:
    with pytest.raises(HitchError) as info:
        read_safetensors_header(path)
    assert info.value.code == "local_model_invalid"
    return info.value


def test_real_file_parses(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file({"a": np.zeros((2, 3), np.float32), "b": np.ones((5,), np.int64)}, str(path), metadata={"format": "pt"})
    header = read_safetensors_header(path)
    assert set(header.tensors) == {"a", "b"}
    assert header.tensors["a"].shape == (2, 3)
    assert header.data_bytes == 2 * 3 * 4 + 5 * 8
    assert header.metadata == {"format": "pt"}


def test_valid_hand_written_header(tmp_path: Path) -> None:
    header = {
        "x": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
        "y": {"dtype": "F4", "shape": [4], "data_offsets": [8, 10]},
    }
    assert read_safetensors_header(_raw(tmp_path / "f", header, b"\0" * 10)).data_bytes == 10


@pytest.mark.parametrize(
    ("header", "data", "needle"),
    [
        ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "needs 8"),
        ({"x": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "unknown dtype"),
        ({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "invalid shape"),
        ({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4, "ends before"),
        ({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8, "file holds 8"),
        ({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"", "file holds 0"),
        ({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "gap"),
        (
            {
                "x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
            },
            b"\0" * 8,
            "overlaps",
        ),
        ({"x": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "exactly"),
        ({"__metadata__": {"k": 1}}, b"", "__metadata__"),
        ([1, 2], b"", "not a JSON object"),
    ],
)
def test_corrupt_headers_rejected(tmp_path: Path, header: object, data: bytes, needle: str) -> None:
    assert needle in _rejects(_raw(tmp_path / "f", header, data)).message


def test_duplicate_tensor_names_rejected(tmp_path: Path) -> None:
    body = b'{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    assert "duplicate" in _rejects(_raw(tmp_path / "f", body, b"\0")).message


def test_not_json_rejected(tmp_path: Path) -> None:
    assert "not JSON" in _rejects(_raw(tmp_path / "f", b"\xff\xfe{garbage", b"")).message


@pytest.mark.parametrize("length", [0, 1, 1 << 40, MAX_HEADER_BYTES + 1])
def test_header_length_out_of_bounds(tmp_path: Path, length: int) -> None:
    assert "out of bounds" in _rejects(_raw(tmp_path / "f", b"{}", b"", length=length)).message


def test_short_file_rejected(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"\x01\x02")
    assert "shorter" in _rejects(tmp_path / "f").message
