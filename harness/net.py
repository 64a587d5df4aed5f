"""Loopback ports: the one way anything of ours asks the OS for a free port.

The port is free when asked; whoever listens on it later is proven by its own readiness check (the engine's
``/health`` and ``/server_info``), never by the port alone.
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS just reported free on ``host``."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
