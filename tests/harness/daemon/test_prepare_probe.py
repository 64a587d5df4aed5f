"""Probe, then seal, end to end on the fake engine (real daemon, real processes): the pool the engine's
memory budget holds is sealed as a number (less a stated headroom); a different pool is a different lock;
a later start that cannot reproduce the sealed pool is refused with ``inference_lock_mismatch`` and leaves
no engine behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.app.daemon_client import DaemonClient, start_daemon
from harness.errors import HitchError
from harness.lock import validate_lock
from harness.runtimes import get_runtime
from tests.harness.daemon.conftest import FAST
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs

pytestmark = pytest.mark.integration


def _prepare(client: DaemonClient, pool: int) -> dict[str, Any]:
    return client.prepare(
        {
            "model": "local/tiny",
            "device": "cpu",
            "profile": "baseline",
            "runtime": get_runtime(GENERIC_RUNTIME).runtime_id,
            "engine": "fake",
            "fake_flags": ["--fake-kv-pool-tokens", str(pool)],
            "context_tokens": 1024,
        }
    )


def test_prepare_seals_the_probed_pool_and_a_later_start_must_reproduce_it(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    first = _prepare(client, 50_000)
    lock = validate_lock(json.loads(Path(first["lock_path"]).read_text()))
    # the engine chose 50 000; the lock seals it less the (CPU) headroom a later start may miss
    assert lock.execution.max_total_tokens == 25_000 and first["probed"]["max_total_tokens"] == 50_000
    assert first["resealed"] is True and first["draft_inference_id"] != first["inference_id"]
    validation = json.loads(Path(first["validation_path"]).read_text())
    assert validation["draft"]["max_total_tokens"] == 1024  # the draft's floor: one full-context request
    assert validation["probe"]["stopped"] is True and validation["reproduced"] == {"max_total_num_tokens": 25_000}

    second = _prepare(client, 60_000)
    assert second["inference_id"] != first["inference_id"] and second["draft_inference_id"] == first["draft_inference_id"]

    # The sealed lock on an engine whose memory now holds less: it reports a smaller pool and is refused.
    with pytest.raises(HitchError) as caught:
        client.acquire("run-1", lock=lock.to_json_dict(), engine="fake", fake_flags=["--fake-kv-pool-tokens", "20000"])
    assert caught.value.code == "inference_lock_mismatch"
    assert "max_total_num_tokens" in caught.value.details["fields"]
    assert client.services()["services"] == []  # the refused engine was stopped
    # a little less memory than at the probe, still enough for the sealed pool: the lock reproduces
    lease = client.acquire("run-2", lock=lock.to_json_dict(), engine="fake", fake_flags=["--fake-kv-pool-tokens", "30000"])
    assert lease["inference_id"] == lock.inference_id
    assert client.release(lease["lease_id"]) is True


def test_a_pool_that_cannot_hold_one_request_fails_prepare(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    with pytest.raises(HitchError) as caught:
        _prepare(client, 1000)
    assert caught.value.code == "inference_capacity_exceeded"
    assert caught.value.details == {"max_total_num_tokens": 1000, "context_tokens_per_request": 1024}
    assert client.services()["services"] == []  # the probe service was stopped
    assert not list(inputs.root.sealed_locks.rglob("lock.json"))  # nothing sealed
