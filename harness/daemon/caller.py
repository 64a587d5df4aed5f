"""Who called the daemon: the peer process of its unix socket (``SO_PEERCRED``), as a run's stop record names it.

The daemon's socket is 0600 and every call bears the daemon token, so the caller is this root's own user; what
is recorded is which command stopped a run, for the person reading the record later. A command line of ours never
carries a secret (tokens and keys travel in files), so its first words are safe to keep.
"""

from __future__ import annotations

import os
import socket
import struct

import psutil
from aiohttp import web

__all__ = ["caller_of"]

_WORDS = 6


def caller_of(request: web.BaseRequest, said: str | None = None) -> str:
    """``"hitch local stop svc-… --force (pid 123, uid 0)"``: what the caller ``said`` it is (else its command line)
    and the socket's peer process; ``"unknown caller"`` when neither says anything."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")) if sock is not None else None
    except (OSError, AttributeError):
        raw = None
    if not raw:
        return said or "unknown caller"
    pid, uid, _ = struct.unpack("3i", raw)
    if said:
        return f"{said} (pid {pid}, uid {uid})"
    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        argv = []
    return f"pid {pid}, uid {uid}" if not argv else f"{_command(argv)} (pid {pid}, uid {uid})"


def _command(argv: list[str]) -> str:
    """The program's name and its first arguments: ``hitch local stop svc-… --force``."""
    start = 1 if "python" in os.path.basename(argv[0]) and len(argv) > 1 else 0
    if argv[start] == "-m" and len(argv) > start + 1:
        start += 1
    words = [os.path.basename(argv[start]), *argv[start + 1 : start + _WORDS]]
    return " ".join(words)
