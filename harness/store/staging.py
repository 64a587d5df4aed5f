"""Staging directories and the file mutexes that keep publish, import and GC from racing.

Every import works in its own ``store/.staging/import-*`` directory (same filesystem as
the store, so publishing is a rename) while holding ``locks/inference/staging/<name>.lock``;
GC treats a staging directory whose mutex it can take as a leftover of a dead import.
Publishing or deleting one model happens under ``locks/inference/models/<hex>.lock``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

from harness.paths import HitchRoot

__all__ = ["StagingDir", "model_mutex", "remove_tree", "staging_leftovers"]


def model_mutex(root: HitchRoot, model_id: str) -> FileLock:
    """The mutex held while a model object is published or deleted."""
    path = root.mutexes / "models" / f"{model_id.split(':', 1)[1]}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path))


def _staging_mutex(root: HitchRoot, name: str) -> FileLock:
    path = root.mutexes / "staging" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path))


def _make_writable(func: object, path: str, _exc: object) -> None:
    # Published files are read-only; their directories may be too after a crash mid-chmod.
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path), stat.S_IRWXU)
        os.chmod(path, stat.S_IRWXU)
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)


def remove_tree(path: Path) -> None:
    """Delete ``path`` (file or directory tree), read-only entries included."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=_make_writable)


class StagingDir:
    """A private temp directory under ``root.staging``, removed on exit whatever happens."""

    def __init__(self, root: HitchRoot) -> None:
        self.root = root
        self.path: Path = Path()
        self._mutex: FileLock | None = None

    @property
    def files(self) -> Path:
        return self.path / "files"

    def __enter__(self) -> StagingDir:
        # The mutex first, then the folder: GC must never see an unlocked, live staging directory.
        name = f"import-{uuid.uuid4().hex}"
        self._mutex = _staging_mutex(self.root, name)
        self._mutex.acquire()
        self.path = self.root.staging / name
        try:
            self.root.staging.mkdir(parents=True, exist_ok=True)
            self.path.mkdir(mode=0o700)
            self.files.mkdir()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            remove_tree(self.path)
        finally:
            if self._mutex is not None:
                self._mutex.release()
                with contextlib.suppress(OSError):
                    os.unlink(self._mutex.lock_file)


def staging_leftovers(root: HitchRoot) -> list[Path]:
    """Staging entries no live import holds (their import died or was killed)."""
    if not root.staging.is_dir():
        return []
    leftovers = []
    for entry in sorted(root.staging.iterdir()):
        mutex = _staging_mutex(root, entry.name)
        try:
            mutex.acquire(timeout=0)
        except Timeout:
            continue
        mutex.release()
        leftovers.append(entry)
    return leftovers
