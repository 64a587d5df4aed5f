"""The CLI↔daemon handshake (spec §14, :mod:`harness.handshake`) against real daemon processes.

The daemon of "another checkout" is this project's code copied into a temporary folder and changed there (one
comment added, or the handshake route removed as in code that predates it), then started with that folder first
on ``PYTHONPATH``: a real daemon process running other code on the same root, as happens when two checkouts share
a ``HITCH_ROOT``. The client of this checkout refuses it with ``daemon_upgrade_required``; status and stop still
reach it, so the remedy the error names works.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.app.daemon_client import DaemonClient, start_daemon
from harness.errors import HitchError
from harness.handshake import API_VERSION, CAPABILITIES, check_handshake, code_identity
from harness.paths import DaemonPaths, HitchRoot
from tests.harness.daemon.conftest import FAST, as_json, hitch, stop_quietly

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _copy_code(dest: Path, change: Callable[[Path], None]) -> Path:
    for package in ("harness", "gateway", "fixtures"):
        shutil.copytree(REPO / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    change(dest)
    return dest


@pytest.fixture
def other_daemon(tmp_path: Path) -> Iterator[Callable[[Callable[[Path], None]], HitchRoot]]:
    roots: list[HitchRoot] = []
    procs: list[subprocess.Popen[bytes]] = []

    def start(change: Callable[[Path], None]) -> HitchRoot:
        code = _copy_code(tmp_path / f"checkout-{len(roots)}", change)
        root = HitchRoot(tmp_path / f"root-{len(roots)}")
        roots.append(root)
        env = {**os.environ, "PYTHONPATH": str(code)}
        with (tmp_path / f"daemon-{len(roots)}.log").open("ab") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "harness.daemon", "--root", str(root.path)],
                env=env, cwd=code, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            ))  # fmt: skip
        paths = DaemonPaths(root)
        end = time.monotonic() + 60
        while not (paths.socket.exists() and paths.token.exists()):
            assert time.monotonic() < end, (tmp_path / f"daemon-{len(roots)}.log").read_text()[-2000:]
            time.sleep(0.05)
        return root

    yield start
    for root in roots:
        stop_quietly(root)
    for proc in procs:  # collected, never left a zombie
        proc.wait(timeout=60)


def _comment(code: Path) -> None:
    path = code / "harness" / "daemon" / "runs.py"
    path.write_text(path.read_text() + "\n# a change made in another checkout\n")


def _no_handshake(code: Path) -> None:
    path = code / "harness" / "daemon" / "server.py"
    text = path.read_text()
    assert "@routes.get(HANDSHAKE_PATH)" in text
    path.write_text(text.replace("@routes.get(HANDSHAKE_PATH)", "@routes.get('/v1/no-handshake-yet')"))


def test_the_daemon_of_this_code_answers_the_handshake(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    start_daemon(root, FAST)
    try:
        client = DaemonClient(root)
        assert client.services()["services"] == []
        shake = client.handshake
        assert shake is not None and shake["api_version"] == API_VERSION and tuple(shake["capabilities"]) == CAPABILITIES
        assert shake["code"]["digest"] == code_identity()["digest"]
    finally:
        stop_quietly(root)


@pytest.mark.parametrize(
    ("change", "says"), [(_comment, "runs other code"), (_no_handshake, "predates the CLI↔daemon handshake")]
)
def test_a_daemon_of_other_code_is_refused_and_can_still_be_stopped(
    other_daemon: Callable[[Callable[[Path], None]], HitchRoot], change: Callable[[Path], None], says: str
) -> None:
    root = other_daemon(change)
    with pytest.raises(HitchError) as caught:
        DaemonClient(root).services()
    err = caught.value
    assert err.code == "daemon_upgrade_required" and says in err.message and "hitch daemon stop" in err.message
    assert err.details["client_code"]["digest"] == code_identity()["digest"]
    # the CLI says the same, with the table's exit code, and does nothing else
    out = hitch(root, "run", "cancel", "some-run", "--json")
    assert out.returncode == 4 and json.loads(out.stdout)["error"]["code"] == "daemon_upgrade_required"
    # status and stop are exempt: the operator sees the daemon and stops it
    pid = as_json(hitch(root, "daemon", "status", "--json"))["pid"]
    assert as_json(hitch(root, "daemon", "stop", "--json"))["stopped"] is True
    assert not DaemonPaths(root).socket.exists() and pid > 0


def test_handshake_answers_are_judged_field_by_field() -> None:
    mine = {"api_version": API_VERSION, "capabilities": list(CAPABILITIES), "code": code_identity(), "pid": 1}
    check_handshake("/r", 200, mine)  # accepted
    cases = [
        (404, None, "predates"),
        (200, {**mine, "api_version": "0"}, "API version 0"),
        (200, {**mine, "capabilities": [c for c in CAPABILITIES if c != "runs.rerun.v1"]}, "lacks runs.rerun.v1"),
        (200, {**mine, "code": {"digest": "sha256:" + "0" * 64, "source": "/elsewhere"}}, "runs other code (from /elsewhere)"),
    ]
    for status, answer, says in cases:
        with pytest.raises(HitchError, match="daemon_upgrade_required") as caught:
            check_handshake("/r", status, answer)
        assert says in caught.value.message
