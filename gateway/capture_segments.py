"""One run's full capture on disk: append-only segment files rotated by size, and an index appended per request.

Owns :class:`CaptureSegments` and :func:`read_captures`. Under ``<capture dir>/<binding id>/``:

- ``segment-NNNNN.bin``: the request bodies sent upstream and the response bytes returned, back to back, in the
  order requests ended; a segment is closed once the next payload would take it past ``segment_bytes`` (a
  payload larger than that gets a segment of its own), so a run holds ``total bytes / segment_bytes + 1``
  of them, never one file per request;
- ``index.jsonl``: one line per request: its id, run, route, statuses, digests and sizes (the evidence row's
  capture fields), the segment and the ``[offset, length]`` of its request and response bytes.

Every append runs on the gateway's writer thread; each file's sha256 and size are kept as they are written, so
the end of a run lists its capture files with their digests in O(segments), reading nothing back
(:meth:`CaptureSegments.files`). Runs written before this layout (one ``*.meta.json`` / ``*.request.json`` /
``*.response.bin`` per request) keep their own files and index; both layouts are read by :func:`read_captures`.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.paths import ensure_private_dir

__all__ = ["INDEX_NAME", "SEGMENT_BYTES", "CaptureSegments", "read_captures"]

INDEX_NAME = "index.jsonl"
SEGMENT_BYTES = 64 << 20


class _Tracked:
    """One append-only file with the sha256 and size of what was written to it."""

    __slots__ = ("hash", "name", "size")

    def __init__(self, name: str) -> None:
        self.name = name
        self.size = 0
        self.hash = hashlib.sha256()

    def append(self, folder: Path, parts: list[bytes]) -> int:
        """Append ``parts``; returns the offset they start at."""
        offset = self.size
        fd = os.open(folder / self.name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for part in parts:
                view = memoryview(part)
                while view:
                    view = view[os.write(fd, view) :]
                self.hash.update(part)
                self.size += len(part)
        finally:
            os.close(fd)
        return offset

    def entry(self) -> tuple[str, int, str]:
        return self.name, self.size, "sha256:" + self.hash.hexdigest()


class CaptureSegments:
    """The capture files of one binding (see the module's doc); :meth:`append` runs on the writer thread."""

    def __init__(self, folder: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.folder = folder
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._closed: list[tuple[str, int, str]] = []
        self._segment: _Tracked | None = None
        self._index = _Tracked(INDEX_NAME)

    def append(self, record: dict[str, Any], request: bytes, response: bytes) -> None:
        """One request's payloads into the current segment (rotated first when they would not fit), then its line."""
        with self._lock:
            ensure_private_dir(self.folder)
            size = len(request) + len(response)
            seg = self._segment
            if seg is None or (seg.size and seg.size + size > self.segment_bytes):
                if seg is not None:
                    self._closed.append(seg.entry())
                seg = self._segment = _Tracked(f"segment-{len(self._closed):05d}.bin")
            offset = seg.append(self.folder, [request, response])
            line = {
                **record,
                "segment": seg.name,
                "request": [offset, len(request)],
                "response": [offset + len(request), len(response)],
            }
            self._index.append(self.folder, [json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n"])

    def files(self) -> list[tuple[str, int, str]]:
        """(name, size, ``sha256:<hex>``) of every file written so far, in path order."""
        with self._lock:
            out = list(self._closed)
            if self._segment is not None:
                out.append(self._segment.entry())
            if self._index.size:
                out.append(self._index.entry())
            return sorted(out)


def read_captures(folder: Path) -> Iterator[tuple[dict[str, Any], bytes, bytes]]:
    """(record, request bytes, response bytes) of every request captured in ``folder`` (one binding's), in the order
    they were written; runs of the per-request layout are read from their files (metadata only: empty bytes)."""
    index = folder / INDEX_NAME
    if index.is_file():
        handles: dict[str, Any] = {}
        try:
            with index.open("rb") as lines:
                for raw in lines:
                    line = json.loads(raw)
                    seg = handles.get(line["segment"])
                    if seg is None:
                        seg = handles[line["segment"]] = (folder / line["segment"]).open("rb")
                    parts = []
                    for offset, length in (line["request"], line["response"]):
                        seg.seek(offset)
                        parts.append(seg.read(length))
                    yield line, parts[0], parts[1]
        finally:
            for handle in handles.values():
                handle.close()
        return
    for meta in sorted(folder.glob("*.meta.json")):
        base = meta.name[: -len(".meta.json")]
        req, resp = folder / f"{base}.request.json", folder / f"{base}.response.bin"
        yield (
            json.loads(meta.read_bytes()),
            req.read_bytes() if req.is_file() else b"",
            resp.read_bytes() if resp.is_file() else b"",
        )
