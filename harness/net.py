"""Loopback ports: the one way anything of ours asks for a free port.

A free port is drawn **below the kernel's ephemeral range** (``ip_local_port_range``) and checked bindable
now. A port from inside the range — what binding port 0 hands out — is also what the kernel gives the next
outgoing connection's local end, so a server that takes its time to reach ``bind`` (SGLang: ~30 s on 2
cores) can lose it to any client on the machine: it happened in ``make certify`` (SGLang logged
``[Errno 98] address already in use`` and never exited). Below the range only another listener can take
it. Whoever listens on the port later is still proven by its own readiness check (the engine's ``/health``
and ``/server_info``), never by the port alone.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable
from pathlib import Path

__all__ = ["ephemeral_range", "free_port", "port_is_bindable"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000  # below: well-known and registered services' habits


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default when it cannot be read)."""
    try:
        low, high = (int(v) for v in _RANGE_FILE.read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def port_is_bindable(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound right now (nobody holds it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> int:
    """A TCP port below the ephemeral range that ``host`` can bind now, never one of ``avoid`` (module doc);
    where the range leaves no room below it, one the OS hands out (bind to port 0)."""
    skip = set(avoid)
    low = ephemeral_range()[0]
    rng = random.SystemRandom()
    for _ in range(256 if low - _LOWEST >= 1024 else 0):
        port = rng.randrange(_LOWEST, low)
        if port not in skip and port_is_bindable(host, port):
            return port
    for _ in range(64):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in skip:
            return port
    raise OSError("no free port outside the avoided ones")  # pragma: no cover - 64 collisions in a row
