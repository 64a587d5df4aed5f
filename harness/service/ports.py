"""Engine ports on the host: choosing one, and telling who listens on it (spec §9.1, issue item 5).

The process launcher cannot hand the engine an already-bound socket, so a port the OS reported free
may be taken by someone else before the engine binds it. Who answers on the port is therefore proven
*before* anything is sent to it:

- :func:`choose_port` returns a port *below the kernel's ephemeral range* that a bind test on ``host``
  just accepted (and never one of ``avoid``, the ports an earlier attempt found held). A port from the
  ephemeral range (what binding port 0 hands out) is also what the kernel gives the next outgoing
  connection's local end: an engine that takes 30 s to reach its ``bind`` lost its port that way once
  (SGLang then logged ``[Errno 98] address already in use`` and never exited, and the start ran into
  its 600 s deadline). Below the range only another listener can take it;
- :func:`listener_state` inspects the kernel's socket table: ``"ours"`` when a process of the engine's
  own process tree listens on the port, ``"other"`` when anything else listens there or holds it as a
  connection's local end (the engine's bind would fail), ``"none"`` when nobody does yet. Readiness polls
  it before its first request: ``"other"`` receives nothing at all — not even ``/health`` — and the start
  fails with ``inference_port_conflict``; the starter then picks a new port within the startup
  deadline. An unknown server is never signalled.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import psutil

from harness.net import free_port

__all__ = ["ListenerState", "choose_port", "ephemeral_range", "listener_state", "port_is_bindable", "process_tree"]

ListenerState = Literal["ours", "other", "none"]
_ANY = ("0.0.0.0", "::", "")


def port_is_bindable(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound right now (nobody holds it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_LOWEST = 10000  # below: well-known and registered services' habits


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default when it cannot be read)."""
    try:
        low, high = (int(v) for v in Path(_RANGE_FILE).read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def choose_port(host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> int:
    """A port below the ephemeral range that ``host`` can bind now, never one of ``avoid`` (module doc);
    where the range leaves no room below it, one the OS hands out (bind to port 0)."""
    skip = set(avoid)
    low = ephemeral_range()[0]
    rng = random.SystemRandom()
    for _ in range(256 if low - _LOWEST >= 1024 else 0):
        port = rng.randrange(_LOWEST, low)
        if port not in skip and port_is_bindable(host, port):
            return port
    for _ in range(64):
        port = free_port(host)
        if port not in skip:
            return port
    raise OSError("no free port outside the avoided ones")  # pragma: no cover - 64 collisions in a row


def process_tree(pid: int) -> set[int]:
    """``pid`` and every live descendant (the engine and the workers it forked)."""
    try:
        proc = psutil.Process(pid)
        return {pid, *(child.pid for child in proc.children(recursive=True))}
    except psutil.Error:
        return set()


def _matches(addr_ip: str, host: str) -> bool:
    return addr_ip == host or addr_ip in _ANY or host in _ANY


def _scan(host: str, port: int, ours: set[int]) -> ListenerState | None:
    """One pass over the socket table; None when the only listener's owner could not be seen."""
    unknown = False
    for conn in psutil.net_connections(kind="tcp"):
        if not conn.laddr or conn.laddr.port != port or not _matches(conn.laddr.ip, host):
            continue
        if conn.status != psutil.CONN_LISTEN:
            # a connection's local end on the port (an outgoing connection that drew it): the engine cannot
            # bind it. Owner-less ones are left out: TIME_WAIT remnants have no owner and hold nothing.
            if conn.pid is not None and conn.pid not in ours:
                return "other"
            continue
        if conn.pid is None:
            unknown = True
        elif conn.pid in ours:
            return "ours"
        else:
            return "other"
    return None if unknown else "none"


def listener_state(host: str, port: int, ours: set[int], rescans: int = 5, pause_s: float = 0.02) -> ListenerState:
    """Who listens on ``host:port``: a process in ``ours``, anyone else, or nobody.

    psutil maps sockets to PIDs by reading every process's fds and then the kernel's socket table: a
    socket opened between the two reads shows no owner. So an owner-less listener is scanned again a few
    times; only one that stays owner-less (a process we cannot see) counts as "other".
    """
    for attempt in range(rescans):
        state = _scan(host, port, ours)
        if state is not None:
            return state
        if attempt + 1 < rescans:
            time.sleep(pause_s)
    return "other"
