"""Parse and validate a safetensors file header without loading any tensor.

Layout: 8-byte little-endian header length N, N bytes of JSON, then the data buffer.
Checked here: N is sane and inside the file; the JSON is an object with unique keys;
each tensor has a known dtype, a non-negative integer shape and ``data_offsets`` whose
span equals ``numel * dtype size``; spans are contiguous, non-overlapping, start at 0
and end exactly at the end of the file. Any failure is ``local_model_invalid``.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HitchError

__all__ = ["DTYPE_BITS", "MAX_HEADER_BYTES", "SafetensorsHeader", "TensorInfo", "read_safetensors_header"]

# Same bound as the safetensors library: larger headers are refused as hostile.
MAX_HEADER_BYTES = 100_000_000

# Bits per element for every dtype the safetensors format defines.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    path: str
    header_len: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]

    @property
    def data_bytes(self) -> int:
        return sum(t.end - t.begin for t in self.tensors.values())


def _bad(rel: str, why: str, **details: Any) -> HitchError:
    return HitchError("local_model_invalid", f"corrupt safetensors header in {rel}: {why}", {"file": rel, **details})


def _unique_pairs(rel: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise _bad(rel, f"duplicate key {key!r}")
            out[key] = value
        return out

    return hook


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(rel: str, name: str, entry: Any) -> TensorInfo:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise _bad(rel, f"tensor {name!r} must have exactly dtype, shape, data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPE_BITS:
        raise _bad(rel, f"tensor {name!r} has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise _bad(rel, f"tensor {name!r} has an invalid shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) and o >= 0 for o in offsets)):
        raise _bad(rel, f"tensor {name!r} has invalid data_offsets")
    begin, end = offsets
    if end < begin:
        raise _bad(rel, f"tensor {name!r} ends before it begins")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 != 0:
        raise _bad(rel, f"tensor {name!r} does not fill whole bytes")
    if end - begin != bits // 8:
        raise _bad(rel, f"tensor {name!r} spans {end - begin} bytes, dtype x shape needs {bits // 8}")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def read_safetensors_header(path: Path, rel: str | None = None) -> SafetensorsHeader:
    """Validate the header of ``path`` against its size; ``rel`` names it in errors."""
    rel = rel or path.name
    with open(path, "rb") as fh:
        file_size = os.fstat(fh.fileno()).st_size
        if file_size < 8:
            raise _bad(rel, "file shorter than the 8-byte length prefix")
        (header_len,) = struct.unpack("<Q", fh.read(8))
        if header_len < 2 or header_len > MAX_HEADER_BYTES or header_len > file_size - 8:
            raise _bad(rel, f"header length {header_len} is out of bounds", header_len=header_len, file_size=file_size)
        raw = fh.read(header_len)
    if len(raw) != header_len:
        raise _bad(rel, "file ends inside the header")
    try:
        parsed = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_pairs(rel))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(rel, f"header is not JSON ({exc.__class__.__name__})") from None
    if not isinstance(parsed, dict):
        raise _bad(rel, "header is not a JSON object")
    metadata = parsed.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise _bad(rel, "__metadata__ must map strings to strings")
    tensors = {name: _tensor(rel, name, entry) for name, entry in parsed.items()}
    data_len = file_size - 8 - header_len
    cursor = 0
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if info.begin != cursor:
            why = "overlaps the previous tensor" if info.begin < cursor else "leaves a gap before it"
            raise _bad(rel, f"tensor {info.name!r} {why}")
        cursor = info.end
    if cursor != data_len:
        raise _bad(rel, f"tensor data covers {cursor} bytes but the file holds {data_len}", data_bytes=data_len)
    return SafetensorsHeader(rel, header_len, tensors, dict(metadata))
