"""Stopping a child process the certify code started (engines, gateways, benchmark arms): TERM, then KILL."""

from __future__ import annotations

import signal
import subprocess

__all__ = ["stop_process"]


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    """SIGTERM, wait ``timeout_s``, then SIGKILL and wait again; nothing when it already exited."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)
