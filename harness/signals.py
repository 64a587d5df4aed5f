"""Serving until told to stop: the one SIGTERM/SIGINT handling of our single-purpose asyncio servers (the
fake engine, the fault proxy, the standalone gateway, the perf reference proxy).

It sits at the bottom of the tree (it imports nothing of ours) because those servers live in layers that may
not import each other; the fake engine's image copies it in (:mod:`fixtures.images.fake_engine`).
"""

from __future__ import annotations

import asyncio
import signal

__all__ = ["stop_requested"]


def stop_requested() -> asyncio.Event:
    """An event set by the first SIGTERM or SIGINT this process receives; call it on the serving loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
