"""The daemon's socket path always fits a unix socket (about 107 bytes), however deep the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.paths import DaemonPaths, HitchRoot


def test_a_shallow_root_keeps_its_socket_inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    root = HitchRoot(Path("/r"))
    assert DaemonPaths(root).socket == Path("/r/inference/daemon/daemon.sock")


@pytest.mark.parametrize("xdg", [None, "/run/user/0", "/" + "x" * 120])
def test_a_deep_root_uses_a_short_per_user_place(xdg: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if xdg is None:
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    else:
        monkeypatch.setenv("XDG_RUNTIME_DIR", xdg)
    deep = HitchRoot(Path("/" + "/".join(["deep-directory-name"] * 8)))
    sock = DaemonPaths(deep).socket
    assert len(str(sock)) <= 100
    expected_dir = Path("/run/user/0/hitch") if xdg == "/run/user/0" else Path(f"/tmp/hitch-{os.getuid()}")
    assert sock.parent == expected_dir and sock.name.startswith("d-")
    assert DaemonPaths(deep).socket == sock  # every client computes the same place
