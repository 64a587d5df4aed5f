"""Engine ports on the host: choosing one, and telling who listens on it (spec §9.1).

The process launcher cannot hand the engine an already-bound socket, so a port the OS reported free
may be taken by someone else before the engine binds it. Who answers on the port is therefore proven
*before* anything is sent to it:

- :func:`choose_port` returns a port *below the kernel's ephemeral range* that a bind test on ``host``
  just accepted (:func:`harness.net.free_port`, which says why), never one of ``avoid`` (the ports an
  earlier attempt found held);
- :func:`listener_state` inspects the kernel's socket table: ``"ours"`` when a process of the engine's
  own process tree listens on the port, ``"other"`` when anything else listens there or holds it as a
  connection's local end (the engine's bind would fail), ``"none"`` when nobody does yet. Readiness polls
  it before its first request: ``"other"`` receives nothing at all — not even ``/health`` — and the start
  fails with ``inference_port_conflict``; the starter then picks a new port within the startup
  deadline. An unknown server is never signalled.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Literal

import psutil

from harness.net import free_port, port_is_bindable

__all__ = ["ListenerState", "choose_port", "listener_state", "port_is_bindable", "process_tree"]

ListenerState = Literal["ours", "other", "none"]
_ANY = ("0.0.0.0", "::", "")


def choose_port(host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> int:
    """The engine's port: :func:`harness.net.free_port` (below the ephemeral range), never one of ``avoid``."""
    return free_port(host, avoid)


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
