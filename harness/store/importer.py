"""``import_model``: a checkpoint directory into the content-addressed store (spec §7.2).

Procedure: scan and check the source (fail fast, nothing copied); copy every file into a
staging directory while hashing it; re-scan and re-stat the source so a file changed,
added or removed during the import is ``local_model_source_changed``; re-hash the copy;
check the *copy* again and build the manifest from it; publish under the model's lock
(files directory rename, then the manifest); point the alias. Whatever fails — bad input,
a changed source, ENOSPC, an interrupt — the staging directory is removed and nothing is
published. A model already published with the same id is success (concurrent imports).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.contracts.model import LocalModelManifestV1, ModelProvenance
from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_json
from harness.store import hashing
from harness.store.aliases import set_alias, validate_alias
from harness.store.checkpoint_check import ScannedFile, check_checkpoint, scan_checkpoint
from harness.store.manifest import build_manifest, manifest_path, model_files_dir, read_manifest
from harness.store.progress import ImportProgress
from harness.store.staging import StagingDir, model_mutex, remove_tree
from harness.store.tool_call_format import resolve_tool_call_parser

__all__ = ["ImportResult", "import_model"]

FileHook = Callable[[str], None]


@dataclass(frozen=True)
class ImportResult:
    model_id: str
    manifest: LocalModelManifestV1
    alias: str
    previous_model_id: str | None  # what the alias pointed to before, if anything
    already_present: bool  # the object was published before (same bytes imported earlier)
    files_dir: Path


@dataclass(frozen=True)
class _SourceStat:
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int

    @classmethod
    def of(cls, st: os.stat_result) -> _SourceStat:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _changed(rel: str, why: str) -> HitchError:
    return HitchError(
        "local_model_source_changed", f"{rel} changed during the import ({why}); nothing was published", {"file": rel}
    )


def _copy_one(item: ScannedFile, dst: Path, progress: ImportProgress | None) -> tuple[hashing.FileDigest, _SourceStat]:
    try:
        before = _SourceStat.of(os.stat(item.source))
        src = open(item.source, "rb", buffering=0)  # noqa: SIM115 - closed below, errors mapped per side
    except FileNotFoundError:
        raise _changed(item.rel, "it disappeared") from None
    except OSError as exc:
        raise HitchError("local_model_invalid", f"cannot read {item.rel}: {exc.strerror}", {"file": item.rel}) from None
    with src:
        if _SourceStat.of(os.fstat(src.fileno())) != before:
            raise _changed(item.rel, "replaced while opening")
        if progress is not None:
            progress.start_file(item.rel, before.size)
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(dst, "xb", buffering=0) as out:
            try:
                digest = hashing.copy_and_hash(src, out, on_bytes=progress.advance if progress else None)
            except hashing.SourceReadError as exc:
                raise HitchError("local_model_invalid", f"cannot read {item.rel}: {exc.strerror}", {"file": item.rel}) from None
    if digest.size != before.size:
        raise _changed(item.rel, f"read {digest.size} bytes, expected {before.size}")
    os.chmod(dst, 0o444)
    return digest, before


def _copy_all(
    scanned: list[ScannedFile], files_dir: Path, progress: ImportProgress | None, on_file_copied: FileHook | None
) -> dict[str, hashing.FileDigest]:
    digests: dict[str, hashing.FileDigest] = {}
    stats: dict[str, _SourceStat] = {}
    for item in scanned:
        digests[item.rel], stats[item.rel] = _copy_one(item, files_dir / item.rel, progress)
        if on_file_copied is not None:
            on_file_copied(item.rel)
    for item in scanned:
        try:
            after = _SourceStat.of(os.stat(item.source))
        except FileNotFoundError:
            raise _changed(item.rel, "it disappeared") from None
        if after != stats[item.rel]:
            raise _changed(item.rel, "size, mtime or inode differ after copying")
    return digests


def _verify_copy(files_dir: Path, digests: dict[str, hashing.FileDigest], progress: ImportProgress | None) -> None:
    if progress is not None:
        progress.phase("verifying copy")
    for rel, expected in digests.items():
        actual = hashing.hash_file(files_dir / rel)
        if actual != expected:
            raise HitchError("storage_write_failed", f"the staged copy of {rel} does not match its source", {"file": rel})


def _publish(
    root: HitchRoot, stage: StagingDir, manifest: LocalModelManifestV1, alias: str, move_alias: bool
) -> tuple[bool, str | None]:
    model_id = manifest.model_id
    files_dir, mpath = model_files_dir(root, model_id), manifest_path(root, model_id)
    with model_mutex(root, model_id):
        already = mpath.is_file()
        if already:
            stored = read_manifest(root, model_id)  # an unreadable or forged manifest is not "the same object"
            if stored.chat_template.tool_call_parser != manifest.chat_template.tool_call_parser:
                # Same bytes, another serving choice (the parser is no part of model_id): the new one holds.
                atomic_write_json(mpath, stored.model_copy(update={"chat_template": manifest.chat_template}).to_json_dict())
        if not files_dir.is_dir() or not already:
            if files_dir.exists() or files_dir.is_symlink():
                # Left by a publish that died before writing its manifest: never trusted, replaced.
                os.rename(files_dir, stage.path / "stale")
            files_dir.parent.mkdir(parents=True, exist_ok=True)
            os.rename(stage.files, files_dir)
        if not already:
            try:
                atomic_write_json(mpath, manifest.to_json_dict())
            except BaseException:
                remove_tree(files_dir)
                raise
        # Under the model lock, so GC cannot delete the object between publish and alias.
        previous = set_alias(root, alias, model_id, move=move_alias)
    return already, previous


def _storage_failure(exc: BaseException) -> HitchError:
    if isinstance(exc, KeyboardInterrupt):
        return HitchError("storage_write_failed", "import interrupted; nothing was published", {"reason": "interrupted"})
    assert isinstance(exc, OSError)
    reason = errno.errorcode.get(exc.errno or 0, "unknown")
    return HitchError("storage_write_failed", f"writing the store failed ({reason}); nothing was published", {"errno": reason})


def import_model(
    root: HitchRoot,
    src: Path,
    alias: str,
    *,
    progress: ImportProgress | None = None,
    provenance: ModelProvenance | None = None,
    on_file_copied: FileHook | None = None,
    tool_call_parser: str | None = None,
    move_alias: bool = True,
) -> ImportResult:
    """Import the checkpoint directory ``src`` and point ``alias`` at it. ``tool_call_parser`` (a parser name,
    or ``none``) overrides the one the chat template shows. ``move_alias=False`` refuses to move an alias that
    names another model (``local_model_alias_taken``; the model is published all the same, unaliased).

    ``on_file_copied`` is called with each relative path right after its copy (tests use
    it to change the source mid-import; nothing else should need it).
    """
    validate_alias(alias)
    resolve_tool_call_parser(None, tool_call_parser)  # an unknown name is refused before any copy
    src = Path(src)
    scanned = scan_checkpoint(src)
    check_checkpoint(src.resolve(), [f.rel for f in scanned])
    if progress is not None:
        progress.begin(sum(os.stat(f.source).st_size for f in scanned), len(scanned))
    try:
        with StagingDir(root) as stage:
            digests = _copy_all(scanned, stage.files, progress, on_file_copied)
            if [(f.rel, f.source) for f in scan_checkpoint(src)] != [(f.rel, f.source) for f in scanned]:
                raise HitchError("local_model_source_changed", "files were added, removed or relinked during the import")
            _verify_copy(stage.files, digests, progress)
            facts = check_checkpoint(stage.files, sorted(digests))
            manifest = build_manifest(facts, digests, provenance, tool_call_parser)
            already, previous = _publish(root, stage, manifest, alias, move_alias)
    except HitchError:
        raise
    except (OSError, KeyboardInterrupt) as exc:
        raise _storage_failure(exc) from exc
    return ImportResult(
        model_id=manifest.model_id,
        manifest=manifest,
        alias=alias,
        previous_model_id=previous,
        already_present=already,
        files_dir=model_files_dir(root, manifest.model_id),
    )
