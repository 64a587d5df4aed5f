"""A live line on a terminal for the steps that take seconds (``fixtures smollm2``, ``local argv --check``):
``what ...`` while it runs, then ``what ... done (18.2 s)``. Only when stderr is a TTY and the output is not
``--json``; nothing is printed otherwise, and stdout is never touched."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

from harness.cli import units

__all__ = ["step"]

_TICK_S = 1.0


@contextlib.contextmanager
def step(what: str, *, as_json: bool = False) -> Iterator[None]:
    """Show ``what`` with its elapsed time, refreshed each second, until the block ends."""
    if as_json or not sys.stderr.isatty():
        yield
        return
    start = time.monotonic()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(_TICK_S):
            sys.stderr.write(f"\r{what} ... {units.duration(time.monotonic() - start)}")
            sys.stderr.flush()

    sys.stderr.write(f"{what} ...")
    sys.stderr.flush()
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    outcome = "failed"
    try:
        yield
        outcome = "done"
    finally:
        done.set()
        ticker.join()
        sys.stderr.write(f"\r{what} ... {outcome} ({units.duration(time.monotonic() - start)})\n")
        sys.stderr.flush()
