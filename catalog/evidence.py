"""The evidence store of a certification run: the bytes every signed entry names, kept and re-checkable.

Layout, beside the entry in the report directory::

    evidence/sha256-<hex>     one file per distinct content (content-addressed: a name never lies)
    evidence/index.json       EvidenceIndexV1: <check id>/<file name> -> digest, size, check

A check records a file once (:func:`store_blob`, idempotent: the same bytes land on the same name); the
run's controller writes the index; :func:`verify_evidence` re-hashes every file an entry's predicate names
and refuses a missing or altered one with ``catalog_evidence_invalid`` (``hitch catalog verify --evidence``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from harness.contracts.base import parse_record
from harness.contracts.certification import EvidenceFileV1, EvidenceIndexV1
from harness.errors import HitchError
from harness.paths import atomic_write_bytes

__all__ = [
    "EVIDENCE_DIR",
    "INDEX_NAME",
    "blob_path",
    "evidence_dir_of",
    "read_index",
    "store_blob",
    "verify_evidence",
    "write_index",
]

EVIDENCE_DIR = "evidence"
INDEX_NAME = "index.json"
_CHUNK = 1 << 20


def blob_path(directory: Path, digest: str) -> Path:
    return directory / ("sha256-" + digest.removeprefix("sha256:"))


def evidence_dir_of(path: Path) -> Path:
    """A report directory (holding ``evidence/``) or the evidence directory itself."""
    return path / EVIDENCE_DIR if (path / EVIDENCE_DIR).is_dir() else path


def store_blob(directory: Path, data: bytes) -> str:
    """Keep ``data`` under its digest in ``directory``; returns ``sha256:<hex>``."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = blob_path(directory, digest)
    if not path.exists():  # same name, same bytes: another worker may have written it already
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data, mode=0o644)
    return digest


def write_index(directory: Path, files: list[EvidenceFileV1]) -> Path:
    index = EvidenceIndexV1(files=sorted(files, key=lambda f: f.name))
    path = directory / INDEX_NAME
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (index.model_dump_json(indent=1) + "\n").encode(), mode=0o644)
    return path


def read_index(directory: Path) -> EvidenceIndexV1:
    path = evidence_dir_of(directory) / INDEX_NAME
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HitchError("catalog_evidence_invalid", f"cannot read the evidence index {path}: {exc.strerror}", {}) from None
    return parse_record(EvidenceIndexV1, _json(data, path), "catalog_evidence_invalid")


def _json(data: bytes, path: Path) -> object:
    try:
        return json.loads(data)
    except ValueError:
        raise HitchError("catalog_evidence_invalid", f"{path} is not JSON", {"path": str(path)}) from None


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def verify_evidence(evidence: Mapping[str, str], directory: Path) -> int:
    """Re-hash every file ``evidence`` (a predicate's name -> digest) names; returns how many verified.

    Raises ``catalog_evidence_invalid`` naming each file that is missing or whose bytes do not hash to the
    digest the entry signed."""
    where = evidence_dir_of(directory)
    problems: list[dict[str, str]] = []
    for name, digest in sorted(evidence.items()):
        path = blob_path(where, digest)
        if not path.is_file():
            problems.append({"name": name, "digest": digest, "problem": "missing"})
        elif _file_digest(path) != digest:
            problems.append({"name": name, "digest": digest, "problem": "altered"})
    if problems:
        names = ", ".join(f"{p['name']} ({p['problem']})" for p in problems[:5])
        raise HitchError(
            "catalog_evidence_invalid",
            f"{len(problems)} of {len(evidence)} evidence file(s) do not verify: {names}",
            {"dir": str(where), "problems": problems},
        )
    return len(evidence)
