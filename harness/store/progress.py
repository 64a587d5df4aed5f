"""Progress reporting for imports: a protocol the importer calls, and a rich bar on stderr.

The store never prints on its own; the CLI passes :class:`RichImportProgress` only when
stderr is a terminal and ``--json`` is off.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

__all__ = ["ImportProgress", "RichImportProgress"]


class ImportProgress(Protocol):
    def begin(self, total_bytes: int, files: int) -> None: ...

    def start_file(self, rel: str, size: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def phase(self, name: str) -> None: ...


class RichImportProgress:
    """One bar over all bytes to hash and copy; the description names the current file."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("{task.description}", justify="left"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
            transient=True,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> RichImportProgress:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()

    def begin(self, total_bytes: int, files: int) -> None:
        self._task = self._progress.add_task(f"hashing {files} files", total=total_bytes)

    def start_file(self, rel: str, size: int) -> None:
        if self._task is not None:
            self._progress.update(self._task, description=rel)

    def advance(self, nbytes: int) -> None:
        if self._task is not None:
            self._progress.advance(self._task, nbytes)

    def phase(self, name: str) -> None:
        if self._task is not None:
            self._progress.update(self._task, description=name)
