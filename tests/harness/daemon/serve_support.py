"""Running ``hitch local serve`` from a test: the process, its first answer, a chat through its URL, its stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.paths import HitchRoot
from tests.harness.daemon.conftest import HITCH

__all__ = ["WAIT_S", "chat", "serve_process", "stop_serve"]

WAIT_S = 120.0


def serve_process(root: HitchRoot, tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], dict[str, Any], Path, Path]:
    out, err = tmp_path / "serve.out", tmp_path / "serve.err"
    argv = [*HITCH, "local", "serve", "local/tiny", "--device", "cpu", "--profile", "baseline", "--engine", "fake"]
    with out.open("w") as out_f, err.open("w") as err_f:
        proc = subprocess.Popen(
            [*argv, *extra, "--json", "--root", str(root.path)],
            stdout=out_f,
            stderr=err_f,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        lines = out.read_text().splitlines()
        if lines:
            return proc, json.loads(lines[0]), out, err
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}: {err.read_text()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("serve printed nothing")


def chat(run: dict[str, Any], token: str) -> httpx.Response:
    body = {"model": run["wire_model"], "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    return httpx.post(
        f"{run['base_url']}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30.0,
        trust_env=False,
    )


def stop_serve(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)
