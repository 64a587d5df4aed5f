"""What a check looks at while it waits: a condition polled to a deadline, a process, the engine's load, a
gateway's evidence rows, the session's sealed lock.

Everything here polls for a condition with a deadline and fails the check with what it waited for; nothing
races a sleep against another process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from certify.session import CertifyEnv
from harness.app.inventory import model_files
from harness.contracts.lock import InferenceLockV1
from harness.contracts.service import InferenceServiceRecordV1
from harness.engine.load import LOADS_PATH, METRICS_PATH, load_from_loads, load_from_metrics
from harness.lock import load_sealed_lock
from harness.service.state_store import ServiceStateStore

__all__ = [
    "WaitTimeout",
    "engine_load",
    "evidence_rows",
    "kill_pid",
    "model_dir",
    "read_evidence",
    "session_lock",
    "session_service",
    "wait_for",
    "wait_until",
]

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition a check waited for did not come (an assertion: the check fails with what it waited for)."""


def wait_until(probe: Callable[[], T | None], timeout_s: float, interval_s: float = 0.02, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; fail the check after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > end:
            raise WaitTimeout(f"timed out after {timeout_s:.1f}s waiting for {what}")
        time.sleep(interval_s)


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes; whether it held (for a check that reports
    the miss itself)."""
    try:
        return wait_until(predicate, timeout_s, interval_s)
    except WaitTimeout:
        return False


def kill_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def engine_load(engine_url: str, headers: dict[str, str]) -> int:
    """Requests running or waiting in the engine: ``GET /v1/loads`` (SGLang and the fake answer alike), else
    SGLang's ``/metrics`` gauges."""
    r = httpx.get(engine_url + LOADS_PATH, headers=headers, timeout=30)
    load = load_from_loads(r.json()) if r.status_code == 200 else None
    if load is None:
        r = httpx.get(engine_url + METRICS_PATH, headers=headers, timeout=30)
        r.raise_for_status()
        load = load_from_metrics(r.text)
    return load.total


def read_evidence(gateway_dir: Path, binding_id: str) -> list[dict[str, Any]]:
    """The evidence rows of a binding on disk now (the gateway writes them in the background)."""
    path = gateway_dir / "evidence" / f"{binding_id}.requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def evidence_rows(gateway_dir: Path, binding_id: str, at_least: int = 1, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The evidence rows of a binding, once at least ``at_least`` are on disk (the gateway batches writes)."""

    def rows() -> list[dict[str, Any]] | None:
        found = read_evidence(gateway_dir, binding_id)
        return found if len(found) >= at_least else None

    return wait_until(rows, timeout_s, what=f"{at_least} evidence row(s) for {binding_id}")


def session_lock(env: CertifyEnv) -> InferenceLockV1:
    return load_sealed_lock(env.root, env.run.inference_id)


def session_service(env: CertifyEnv) -> InferenceServiceRecordV1 | None:
    """The session service's last state record (None before it ever started)."""
    return ServiceStateStore(env.root, env.run.service_id).read()


def model_dir(env: CertifyEnv) -> Path:
    """The session model's checkpoint directory in the store (what the engine loads)."""
    return model_files(env.root, env.model_id)
