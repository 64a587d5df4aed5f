"""Streaming sha256 of checkpoint files, alone or while copying them.

One read buffer (8 MiB, reused) per call; ``hashlib`` releases the GIL for large
updates, so this runs at the speed of OpenSSL's sha256 — the same as ``sha256sum``.
A read failure is raised as :class:`SourceReadError` so callers can tell a bad
source (input) from a failing store (storage).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["CHUNK_SIZE", "FileDigest", "SourceReadError", "copy_and_hash", "hash_file", "hash_stream"]

CHUNK_SIZE = 8 * 1024 * 1024

ByteCallback = Callable[[int], None]


class SourceReadError(OSError):
    """Reading the source failed (as opposed to writing the copy)."""


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256_hex: str

    @property
    def sha256_id(self) -> str:
        return "sha256:" + self.sha256_hex


def _readinto(src: BinaryIO, buf: bytearray) -> int:
    try:
        n = src.readinto(buf)  # type: ignore[attr-defined]
    except OSError as exc:
        raise SourceReadError(exc.errno, f"cannot read source: {exc.strerror}") from exc
    return int(n or 0)


def _write_all(dst: BinaryIO, data: memoryview) -> None:
    while data:
        written = dst.write(data)
        if written is None:  # non-blocking raw file; never the case for regular files
            raise OSError("short write to a non-blocking file")
        data = data[written:]


def hash_stream(
    src: BinaryIO, *, chunk_size: int = CHUNK_SIZE, on_bytes: ByteCallback | None = None, dst: BinaryIO | None = None
) -> FileDigest:
    """sha256 and size of everything ``src`` yields; each piece is also written to ``dst`` when given."""
    h = hashlib.sha256()
    buf = bytearray(chunk_size)
    view = memoryview(buf)
    total = 0
    while True:
        n = _readinto(src, buf)
        if n == 0:
            break
        chunk = view[:n]
        h.update(chunk)
        if dst is not None:
            _write_all(dst, chunk)
        total += n
        if on_bytes is not None:
            on_bytes(n)
    return FileDigest(total, h.hexdigest())


def hash_file(path: Path, *, chunk_size: int = CHUNK_SIZE, on_bytes: ByteCallback | None = None) -> FileDigest:
    """sha256 and size of the file at ``path``, read once in ``chunk_size`` pieces."""
    with open(path, "rb", buffering=0) as fh:
        return hash_stream(fh, chunk_size=chunk_size, on_bytes=on_bytes)


def copy_and_hash(
    src: BinaryIO, dst: BinaryIO, *, chunk_size: int = CHUNK_SIZE, on_bytes: ByteCallback | None = None
) -> FileDigest:
    """Copy ``src`` to ``dst`` and hash the bytes on the way; ``dst`` is fsynced.

    Write failures (ENOSPC, EIO, ...) surface as plain ``OSError``; read failures as
    :class:`SourceReadError`.
    """
    digest = hash_stream(src, chunk_size=chunk_size, on_bytes=on_bytes, dst=dst)
    dst.flush()
    os.fsync(dst.fileno())
    return digest
