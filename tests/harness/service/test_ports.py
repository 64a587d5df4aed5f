"""Engine ports: chosen below the kernel's ephemeral range, and a port an outgoing connection drew is
told apart from a free one (the engine's bind would fail there)."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from harness.net import ephemeral_range, port_is_bindable
from harness.service.ports import choose_port, listener_state


def test_a_chosen_port_lies_below_the_ephemeral_range_and_is_bindable() -> None:
    low, _ = ephemeral_range()
    picks = {choose_port("127.0.0.1") for _ in range(20)}
    assert all(p < low and port_is_bindable("127.0.0.1", p) for p in picks)
    first = next(iter(picks))
    assert all(choose_port("127.0.0.1", avoid=[first]) != first for _ in range(20))


def test_a_port_held_by_an_outgoing_connection_is_another_s_and_cannot_be_listened_on() -> None:
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = choose_port("127.0.0.1")
        client.bind(("127.0.0.1", port))  # what the kernel does for an outgoing connection in its range
        client.connect(server.getsockname())
        accepted, _ = server.accept()
        with accepted, socket.socket() as engine:
            engine.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            with pytest.raises(OSError) as exc:
                engine.bind(("127.0.0.1", port))
            assert exc.value.errno == errno.EADDRINUSE
            assert listener_state("127.0.0.1", port, ours={os.getpid() + 10**6}) == "other"
            assert listener_state("127.0.0.1", port, ours={os.getpid()}) == "none"  # our own tree's socket
