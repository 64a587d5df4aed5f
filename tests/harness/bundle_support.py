"""Rewriting a bundle tar the way a tamperer would (for the bundle tests)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

from harness.ids import canonical_json, digest_bytes

__all__ = ["members_of", "rewrite"]


def members_of(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        out = {}
        for info in tar:
            handle = tar.extractfile(info)
            assert handle is not None
            out[info.name] = handle.read()
        return out


def rewrite(path: Path, change: Callable[[dict[str, bytes]], None], *, fix_manifest: bool = False) -> None:
    """Change members in place; ``fix_manifest``: also update bundle.json's sizes and digests to match."""
    members = members_of(path)
    change(members)
    if fix_manifest:
        manifest = json.loads(members["bundle.json"])
        for entry in manifest["files"]:
            data = members[entry["path"]]
            entry["size"], entry["digest"] = len(data), digest_bytes(data)
        members["bundle.json"] = canonical_json(manifest)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ["bundle.json", *[n for n in members if n != "bundle.json"]]:
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            tar.addfile(info, io.BytesIO(members[name]))
    path.write_bytes(buf.getvalue())
