"""A run's sealed evidence set: writing ``inference.ref.json`` and the capture index, and re-hashing them.

Owns :func:`write_capture_index` (``inference/capture-index.json``: every capture file of the run by path, size
and sha256), :func:`seal_ref` (``runs/<id>/inference.ref.json``, :class:`InferenceRefV1`, written once: a ref
that exists is never rewritten) and :func:`verify_run` (``hitch run verify``): the ref's bytes against the
digest ``run.json`` holds, then every file the ref names against its digest, and the capture files against
the index. What changed is named file by file (``changed``: other bytes; ``missing``: gone; ``unsealed``: the
run has no ref yet), never summarised as one boolean.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.contracts.lock import InferenceLockV1
from harness.contracts.run import RunRecordV1
from harness.contracts.run_ref import REF_FILE_NAMES, CaptureFileV1, CaptureIndexV1, InferenceRefV1, RefFileV1
from harness.errors import HitchError
from harness.ids import canonical_json, digest_bytes, digest_json
from harness.paths import HitchRoot, atomic_write_bytes

__all__ = [
    "CAPTURE_INDEX",
    "REF_FILE",
    "REF_PATHS",
    "Change",
    "RunVerification",
    "file_digest",
    "read_ref",
    "seal_ref",
    "verify_run",
    "write_capture_index",
]

REF_FILE = "inference.ref.json"
CAPTURE_INDEX = "capture-index.json"
# what each ref entry names, relative to runs/<run-id>/ (the daemon writes them there: harness.daemon.run_evidence)
REF_PATHS: dict[str, str] = {
    "lock": "inference/lock.json",
    "model_manifest": "inference/model.json",
    "runtime_manifest": "inference/runtime.json",
    "execution": "inference/execution.json",
    "attempts": "inference/attempts.jsonl",
    "engine_requests": "inference/engine-requests.jsonl",
    "capture_index": f"inference/{CAPTURE_INDEX}",
}
_CHUNK = 1 << 20


def file_digest(path: Path) -> tuple[str, int]:
    """(``sha256:<hex>``, size) of a file, read in chunks."""
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size


def _capture_files(capture_dir: Path) -> Iterator[Path]:
    if capture_dir.is_dir():
        yield from sorted(p for p in capture_dir.rglob("*") if p.is_file())


def write_capture_index(run_dir: Path, mode: str, known: list[CaptureFileV1] | None = None) -> CaptureIndexV1:
    """``inference/capture-index.json`` of the run's capture folder (the gateway has settled): ``known`` when the
    gateway kept each file's digest as it wrote it (segments: O(files), nothing read back), else every file
    there hashed now (a run whose daemon died; runs written before segments)."""
    capture_dir = run_dir / "inference" / "capture"
    if known is not None:
        files = sorted(known, key=lambda f: f.path)
    else:
        files = []
        for path in _capture_files(capture_dir):
            digest, size = file_digest(path)
            files.append(CaptureFileV1(path=path.relative_to(capture_dir).as_posix(), size=size, digest=digest))
    index = CaptureIndexV1(mode=mode, files=files)
    atomic_write_bytes(run_dir / REF_PATHS["capture_index"], canonical_json(index.to_json_dict()), mode=0o600)
    return index


def seal_ref(
    run_dir: Path, run_id: str, lock: InferenceLockV1, known: dict[str, tuple[str, int]] | None = None
) -> tuple[InferenceRefV1, str]:
    """Write ``inference.ref.json`` over the files the evidence writer left (once) and return it with its digest;
    ``known`` gives (digest, size) of files whose writer hashed them as it wrote them (the attempt rows), which
    are not read again.

    A ref already on disk is returned as it is: the set is sealed, a second evidence pass cannot reseal it."""
    path = run_dir / REF_FILE
    if path.is_file():
        data = path.read_bytes()
        return InferenceRefV1.model_validate_json(data), digest_bytes(data)
    files = []
    for name in REF_FILE_NAMES:
        given = (known or {}).get(name)
        digest, size = given if given is not None else file_digest(run_dir / REF_PATHS[name])
        files.append(RefFileV1(name=name, path=REF_PATHS[name], digest=digest, size=size))
    ref = InferenceRefV1(
        run_id=run_id,
        inference_id=lock.inference_id,
        lock_digest=digest_json(lock.to_json_dict()),
        model_id=lock.model_id,
        runtime_id=lock.runtime_id,
        files=files,
        sealed_at=time.time(),
    )
    data = canonical_json(ref.to_json_dict())
    atomic_write_bytes(path, data, mode=0o600)
    return ref, digest_bytes(data)


def read_ref(run_dir: Path) -> InferenceRefV1:
    try:
        return InferenceRefV1.model_validate_json((run_dir / REF_FILE).read_bytes())
    except FileNotFoundError:
        raise HitchError("run_evidence_changed", f"{run_dir.name} has no {REF_FILE}", {"run_id": run_dir.name}) from None
    except ValidationError as exc:
        raise HitchError("run_evidence_changed", f"{REF_FILE} of {run_dir.name} is not an InferenceRefV1", {}) from exc


@dataclass(frozen=True)
class Change:
    path: str  # relative to runs/<run-id>/
    what: str  # changed | missing | unsealed | extra
    expected: str | None = None
    found: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "what": self.what, "expected": self.expected, "found": self.found}


@dataclass
class RunVerification:
    run_id: str
    ref_digest: str | None
    checked: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.changes

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "ok": self.ok,
            "ref_digest": self.ref_digest,
            "checked": self.checked,
            "changes": [c.to_json() for c in self.changes],
        }


def _check_file(run_dir: Path, rel: str, expected: str, out: RunVerification) -> bool:
    out.checked.append(rel)
    try:
        found, _ = file_digest(run_dir / rel)
    except FileNotFoundError:
        out.changes.append(Change(rel, "missing", expected))
        return False
    if found != expected:
        out.changes.append(Change(rel, "changed", expected, found))
        return False
    return True


def _check_capture(run_dir: Path, out: RunVerification) -> None:
    try:
        index = CaptureIndexV1.model_validate_json((run_dir / REF_PATHS["capture_index"]).read_bytes())
    except (OSError, ValidationError):
        return  # the index itself was already reported by its digest
    capture = run_dir / "inference" / "capture"
    listed = {f.path for f in index.files}
    for entry in index.files:
        _check_file(run_dir, f"inference/capture/{entry.path}", entry.digest, out)
    for path in _capture_files(capture):
        rel = path.relative_to(capture).as_posix()
        if rel not in listed:
            out.changes.append(Change(f"inference/capture/{rel}", "extra", None, file_digest(path)[0]))


def verify_run(root: HitchRoot, run_id: str) -> RunVerification:
    """Re-hash a run's sealed set; ``run_not_found`` when there is no such run (the changes are in the result)."""
    run_dir = root.runs / run_id
    try:
        record = RunRecordV1.model_validate_json((run_dir / "run.json").read_bytes())
    except FileNotFoundError:
        raise HitchError("run_not_found", f"no run {run_id!r} in this root", {"run_id": run_id}) from None
    except ValidationError as exc:
        raise HitchError("run_evidence_changed", f"runs/{run_id}/run.json is not a RunRecordV1", {"run_id": run_id}) from exc
    out = RunVerification(run_id, record.ref_digest)
    if record.ref_digest is None:
        out.changes.append(Change(REF_FILE, "unsealed", None, None))
        return out
    if not _check_file(run_dir, REF_FILE, record.ref_digest, out):
        return out  # a ref that is not the sealed one says nothing trustworthy about the other files
    ref = read_ref(run_dir)
    intact = {entry.name: _check_file(run_dir, entry.path, entry.digest, out) for entry in ref.files}
    if intact["capture_index"]:  # a changed index says nothing about the capture files
        _check_capture(run_dir, out)
    return out
