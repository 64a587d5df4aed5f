"""One bounded background writer for gateway files (evidence rows, captures).

Owns :class:`BackgroundWriter`: a bounded queue and one writer thread, so file I/O never runs on the
event loop. It takes a :class:`WriteItem` (bytes for one file) or a :class:`WriteJob` (a function that writes
itself, e.g. a capture segment's append, whose offsets are decided on the writer thread). Every file is
created 0600 inside 0700 directories. :meth:`submit` never blocks: it answers False when the queue is full
(the caller marks its capture partial). A write that fails calls the item's
``on_error`` (the capture ledger marks the run's capture failed); routing never depends on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.paths import ensure_private_dir

__all__ = ["BackgroundWriter", "WriteItem", "WriteJob"]

log = logging.getLogger("gateway.writer")


@dataclass(frozen=True)
class WriteItem:
    """``data`` is written as is; a callable ``data`` is called on the writer thread to make the bytes
    (so serialization stays off the event loop)."""

    path: Path
    data: bytes | Callable[[], bytes]
    append: bool = True
    on_error: Callable[[OSError], None] | None = None


@dataclass(frozen=True)
class WriteJob:
    """A write that runs itself on the writer thread; an ``OSError`` it raises goes to ``on_error``."""

    run: Callable[[], None]
    on_error: Callable[[OSError], None] | None = None


_KNOWN_DIRS: set[Path] = set()  # directories this process made or saw (no stat per write)


def write_private(item: WriteItem) -> None:
    """Write or append ``item.data`` to a 0600 file (parents 0700)."""
    parent = item.path.parent
    if parent not in _KNOWN_DIRS:
        if not parent.is_dir():
            ensure_private_dir(parent)
        _KNOWN_DIRS.add(parent)
    data = item.data if isinstance(item.data, bytes) else item.data()
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if item.append else os.O_TRUNC)
    try:
        fd = os.open(item.path, flags, 0o600)
    except FileNotFoundError:  # the directory went away since it was seen: make it again
        ensure_private_dir(parent)
        fd = os.open(item.path, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


class BackgroundWriter:
    """A bounded queue drained by one daemon thread."""

    def __init__(self, max_items: int = 4096, name: str = "gateway-writer") -> None:
        self._queue: queue.Queue[WriteItem | WriteJob | threading.Event | None] = queue.Queue(max_items)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self.dropped = 0
        self.failed = 0

    def submit(self, item: WriteItem | WriteJob) -> bool:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                if isinstance(item, WriteJob):
                    item.run()
                else:
                    write_private(item)
            except OSError as exc:
                self.failed += 1
                name = item.path.name if isinstance(item, WriteItem) else getattr(exc, "filename", None)
                log.warning("gateway write failed: %s (%s)", name, exc.strerror)
                if item.on_error is not None:
                    with contextlib.suppress(Exception):
                        item.on_error(exc)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted so far is written (tests and shutdown)."""
        barrier = threading.Event()
        self._queue.put(barrier, timeout=timeout)
        return barrier.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
