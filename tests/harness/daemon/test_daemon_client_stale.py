"""A daemon that stopped leaves its socket file: every call is ``daemon_unavailable``, and no socket is leaked.

A leaked socket's ResourceWarning surfaces later in whatever code the garbage collector interrupts (a
certification fixture failed on one), so the test collects garbage with warnings as errors.
"""

from __future__ import annotations

import gc
import socket
import warnings
from pathlib import Path

import pytest

from harness.app.daemon_client import DaemonClient, daemon_running
from harness.errors import HitchError
from harness.paths import DaemonPaths, HitchRoot


def _stale_socket(root: HitchRoot) -> Path:
    """A socket file nobody listens on (bound, then closed: every connect is refused)."""
    paths = DaemonPaths(root)
    paths.socket.parent.mkdir(parents=True, exist_ok=True)
    paths.token.parent.mkdir(parents=True, exist_ok=True)
    paths.token.write_text("t" * 32)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(paths.socket))
    assert paths.socket.exists()
    return paths.socket


def test_a_refused_connect_is_daemon_unavailable_and_closes_its_socket(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    _stale_socket(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        for _ in range(3):
            with pytest.raises(HitchError) as err:
                DaemonClient(root).request("GET", "/v1/status")
            assert err.value.code == "daemon_unavailable" and "ConnectError" in str(err.value)
        assert daemon_running(root) is None
        gc.collect()  # a leaked socket warns here, as an error
