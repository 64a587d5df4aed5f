"""``hitch bundle export|verify``: a run's, an evaluation's or an entry's evidence in one tar, checked offline.

Export (:func:`export_bundle`) writes ``bundle.json`` (:class:`BundleManifestV1`: every member by path, size
and sha256) first, then the members in path order with fixed metadata (mtime 0, uid/gid 0, mode 0644), so the
same evidence always gives the same bytes. What goes in is an allow-list (:func:`run_members`,
:func:`evaluation_members`, :func:`entry_members`): manifests, the lock, the execution evidence, the attempt
ledger, the capture *index*, the engine's redacted facts and metrics, the harness's result; never the capture
payloads, a Codex home, model weights, a runtime or a key. Before writing, every member is scanned for the
root's secrets (engine and admin keys, run tokens, the daemon token): one found refuses the export
(``bundle_contains_secret``) and nothing is written.

Verify (:func:`read_bundle`) reads the tar without extracting it: only regular files with plain relative names,
each once, ``bundle.json`` first; every member listed in the manifest with its digest and size, none more. Then
each run in it is checked as ``hitch run verify`` checks one (:func:`check_runs`): ``run.json``'s ``ref_digest``
is the ref's digest and every file the ref names is in the bundle with the ref's digest. A bundle that fails any
of it is ``bundle_invalid`` naming what. (An entry's signature and evidence are checked by the CLI with the
catalog's own verification, on the members extracted by :meth:`Bundle.extract`.)
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from harness.contracts.bundle import BUNDLE_MANIFEST, BundleFileV1, BundleKind, BundleManifestV1
from harness.contracts.evaluation import EvaluationRecordV1
from harness.contracts.run import RunRecordV1
from harness.contracts.run_ref import InferenceRefV1
from harness.errors import HitchError
from harness.ids import canonical_json, digest_bytes
from harness.paths import HitchRoot, atomic_write_bytes
from harness.run_ref import REF_FILE

__all__ = [
    "Bundle",
    "Member",
    "check_runs",
    "entry_members",
    "evaluation_members",
    "export_bundle",
    "read_bundle",
    "root_secrets",
    "run_members",
]

# a run's evidence that a bundle carries (relative to runs/<id>/); the ones a run may lack are skipped
RUN_FILES = (
    "run.json",
    REF_FILE,
    "inference/lock.json",
    "inference/model.json",
    "inference/runtime.json",
    "inference/execution.json",
    "inference/attempts.jsonl",
    "inference/engine-requests.jsonl",
    "inference/capture-index.json",
    "inference/binding.json",
    "inference/identity.json",
    "inference/server-info.json",
    "inference/engine-metrics.start.prom",
    "inference/engine-metrics.end.prom",
    "inference/harness.json",
    "inference/result.json",
    "inference/codex-events.jsonl",
)
_MAX_MEMBER = 1 << 30
_MAX_MEMBERS = 100_000
_MIN_SECRET = 16
_TOKEN = re.compile(r"^[A-Za-z0-9_.~+/=-]+$")  # what a key or token file holds: one word, no JSON


@dataclass(frozen=True)
class Member:
    path: str  # the name inside the bundle
    data: bytes


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise HitchError("storage_write_failed", f"cannot read {path}", {"path": str(path), "error": exc.strerror}) from exc


def run_members(root: HitchRoot, run_id: str) -> list[Member]:
    """The allow-listed evidence of one finished, sealed run (``runs/<id>/...``)."""
    run_dir = root.runs / run_id
    if not (run_dir / "run.json").is_file():
        raise HitchError("run_not_found", f"no run {run_id!r} in this root", {"run_id": run_id})
    record = RunRecordV1.model_validate_json(_read(run_dir / "run.json"))
    if record.ref_digest is None:
        raise HitchError(
            "run_evidence_changed",
            f"run {run_id} has no sealed evidence set ({record.status}); only a sealed run is bundled",
            {"run_id": run_id, "status": record.status},
        )
    return [Member(f"runs/{run_id}/{rel}", _read(run_dir / rel)) for rel in RUN_FILES if (run_dir / rel).is_file()]


def evaluation_members(root: HitchRoot, evaluation_id: str) -> list[Member]:
    """``evals/<id>/evaluation.json`` (and its ``plan.json``) and the evidence of every trial's run that reached a
    service."""
    path = root.path / "evals" / evaluation_id / "evaluation.json"
    if not path.is_file():
        raise HitchError(
            "evaluation_not_found", f"no evaluation {evaluation_id!r} in this root", {"evaluation_id": evaluation_id}
        )
    data = _read(path)
    record = EvaluationRecordV1.model_validate_json(data)
    members = [Member(f"evals/{evaluation_id}/evaluation.json", data)]
    plan = path.parent / "plan.json"  # what it was asked (no secret), when it kept one
    if plan.is_file():
        members.append(Member(f"evals/{evaluation_id}/plan.json", _read(plan)))
    for trial in record.trials:
        kept = RunRecordV1.model_validate_json(_read(root.runs / trial.run_id / "run.json"))
        if kept.ref_digest is not None:  # a trial whose run never reached a service has nothing sealed
            members += run_members(root, trial.run_id)
    return members


def entry_members(entry: Path) -> list[Member]:
    """A signed entry and, when it lies beside it, its evidence store (``evidence/index.json`` and the blobs)."""
    members = [Member(f"entry/{entry.name}", _read(entry))]
    evidence = entry.parent / "evidence"
    if (evidence / "index.json").is_file():
        members += [Member(f"entry/evidence/{p.name}", _read(p)) for p in sorted(evidence.iterdir()) if p.is_file()]
    return members


def root_secrets(root: HitchRoot) -> set[str]:
    """Every secret this root holds in a file (engine and admin keys, run tokens, the daemon token)."""
    found: set[str] = set()
    places = [root.private, root.gateway_dir, root.daemon_dir]
    for place in places:
        if not place.is_dir():
            continue
        for path in place.rglob("*"):
            if not path.is_file() or path.stat().st_size > 4096 or path.stat().st_mode & 0o077:
                continue  # secrets live in small 0600 files
            try:
                text = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                continue
            if len(text) >= _MIN_SECRET and _TOKEN.match(text):
                found.add(text)
    return found


def _refuse_secrets(members: Iterable[Member], secrets: set[str]) -> None:
    for member in members:
        for secret in secrets:
            if secret.encode() in member.data:
                raise HitchError(
                    "bundle_contains_secret",
                    f"{member.path} holds a secret of this root; nothing was written",
                    {"member": member.path},
                )


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = size, 0, 0o644, 0, 0
    info.uname = info.gname = ""
    return info


def export_bundle(
    kind: BundleKind,
    subject: str,
    members: list[Member],
    out: Path,
    *,
    secrets: set[str],
    model_id: str | None = None,
    runtime_id: str | None = None,
) -> BundleManifestV1:
    """Write ``out`` (a tar, atomically); refuses a member that holds one of ``secrets``."""
    _refuse_secrets(members, secrets)
    members = sorted(members, key=lambda m: m.path)
    manifest = BundleManifestV1(
        kind=kind,
        subject=subject,
        created_at=time.time(),
        model_id=model_id,
        runtime_id=runtime_id,
        files=[BundleFileV1(path=m.path, size=len(m.data), digest=digest_bytes(m.data)) for m in members],
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        head = canonical_json(manifest.to_json_dict())
        tar.addfile(_tar_info(BUNDLE_MANIFEST, len(head)), io.BytesIO(head))
        for m in members:
            tar.addfile(_tar_info(m.path, len(m.data)), io.BytesIO(m.data))
    try:
        atomic_write_bytes(out, buf.getvalue(), mode=0o644)
    except OSError as exc:
        raise HitchError("storage_write_failed", f"cannot write {out}", {"path": str(out), "error": exc.strerror}) from exc
    return manifest


def _invalid(message: str, **details: object) -> HitchError:
    return HitchError("bundle_invalid", message, dict(details))


@dataclass(frozen=True)
class Bundle:
    manifest: BundleManifestV1
    files: dict[str, bytes]

    def extract(self, prefix: str, dest: Path) -> list[Path]:
        """Write the members under ``prefix`` (already verified) below ``dest``; returns their paths."""
        out = []
        for name, data in self.files.items():
            if name.startswith(prefix):
                path = dest / name[len(prefix) :]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                out.append(path)
        return out


def _members(tar: tarfile.TarFile) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for info in tar:
        if len(out) >= _MAX_MEMBERS:
            raise _invalid("the bundle has too many members")
        if not info.isreg():
            raise _invalid(f"member {info.name!r} is not a regular file (link, folder or device)", member=info.name)
        if info.size > _MAX_MEMBER:
            raise _invalid(f"member {info.name!r} is larger than a bundle member may be", member=info.name)
        handle = tar.extractfile(info)
        assert handle is not None  # a regular file
        out.append((info.name, handle.read()))
    return out


def read_bundle(path: Path) -> Bundle:
    """Open and check a bundle's members against its manifest (see the module docstring)."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            members = _members(tar)
    except FileNotFoundError:
        raise HitchError("usage_error", f"no bundle at {path}", {"path": str(path)}) from None
    except (tarfile.TarError, OSError) as exc:
        raise _invalid(f"{path} is not a readable tar: {exc}", path=str(path)) from exc
    if not members or members[0][0] != BUNDLE_MANIFEST:
        raise _invalid(f"{BUNDLE_MANIFEST} is not the first member")
    try:
        manifest = BundleManifestV1.model_validate_json(members[0][1])
    except ValidationError as exc:
        raise _invalid(f"{BUNDLE_MANIFEST} is not a BundleManifestV1: {exc.errors()[0]['msg']}") from exc
    files: dict[str, bytes] = {}
    for name, data in members[1:]:
        if name in files or name == BUNDLE_MANIFEST:
            raise _invalid(f"member {name!r} appears twice", member=name)
        files[name] = data
    listed = {f.path: f for f in manifest.files}
    extra, missing = sorted(set(files) - set(listed)), sorted(set(listed) - set(files))
    if extra or missing:
        raise _invalid(
            f"the members are not the manifest's: {len(missing)} missing, {len(extra)} not listed", missing=missing, extra=extra
        )
    for name, entry in listed.items():
        data = files[name]
        if len(data) != entry.size or digest_bytes(data) != entry.digest:
            raise _invalid(f"{name} is not the file the manifest names (other bytes)", member=name, expected=entry.digest)
    return Bundle(manifest, files)


def check_runs(bundle: Bundle) -> list[str]:
    """Every run in the bundle: its ref is the one ``run.json`` sealed and names the bundled files by digest.
    Returns the run ids checked."""
    runs = sorted({name.split("/")[1] for name in bundle.files if name.startswith("runs/") and name.count("/") >= 2})
    for run_id in runs:
        base = f"runs/{run_id}/"
        try:
            record = RunRecordV1.model_validate_json(bundle.files[base + "run.json"])
            ref_bytes = bundle.files[base + REF_FILE]
            ref = InferenceRefV1.model_validate_json(ref_bytes)
        except (KeyError, ValidationError, json.JSONDecodeError) as exc:
            raise _invalid(f"run {run_id}: no readable run.json and {REF_FILE}", run_id=run_id) from exc
        if record.ref_digest != digest_bytes(ref_bytes):
            raise _invalid(f"run {run_id}: {REF_FILE} is not the one run.json sealed", run_id=run_id, member=base + REF_FILE)
        for entry in ref.files:
            data = bundle.files.get(base + entry.path)
            if data is None or digest_bytes(data) != entry.digest:
                raise _invalid(
                    f"run {run_id}: {entry.path} is not the file its sealed ref names", run_id=run_id, member=base + entry.path
                )
    return runs
