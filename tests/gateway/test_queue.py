"""The gateway's own queue through a real gateway and the fake engine (issue 28 item 1).

Several runs on one baseline service (one permit) all get 200, in the order they arrived, however long the
line (up to the gateway's bound); a queued request whose client leaves is gone from the queue at once and is
never sent to the engine. Arrival order is made certain without timing: each request is sent only once the
previous one is seen holding the permit or waiting.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
from typing import Any

import httpx
import pytest

from certify.kit.streams import RawStream
from fixtures.process_faults import wait_for
from gateway.policy import apply_policy
from harness.contracts.lock import InferenceLockV1
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, target_for, token_of

pytestmark = pytest.mark.integration


def _counts(gt: GatewayThread) -> tuple[int, int]:
    """(waiting, in use) over the gateway's queues."""
    return gt.call(lambda: (sum(q.waiting for q in gt.gw.queues.values()), sum(q.in_use for q in gt.gw.queues.values())))


def _chat(tag: str) -> bytes:
    body = {"model": "tiny-wire", "messages": [{"role": "user", "content": f"agent {tag}"}], "max_tokens": 4, "stream": True}
    return json.dumps(body).encode()


def _posted(engine: Engine, lock: InferenceLockV1, tags: list[str]) -> list[str]:
    """The tags of the requests the engine received, in its order (matched by the digest of the body the
    gateway's policy makes of each: the engine records digests, not bodies)."""
    by_digest = {
        "sha256:" + hashlib.sha256(apply_policy("/v1/chat/completions", _chat(t), lock, "tiny-wire").body).hexdigest(): t
        for t in tags
    }
    return [by_digest.get(r["body_sha256"], "?") for r in engine.posts()]


def _headers(rec: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_of(rec)}", "Content-Type": "application/json"}


def test_four_streams_at_once_on_a_baseline_lock_all_get_200_in_fifo_order(engine: Engine, gateway: GatewayThread) -> None:
    lock = make_lock(max_running=1, max_queued=1)  # baseline: the engine's own queue holds 1
    runs = [gateway.register(f"agent-{i}", target_for(engine, lock)) for i in range(4)]
    engine.faults("stall_mid_stream:t=2,after=1")  # the first stream holds the only permit a while

    def send(i: int) -> tuple[int, bytes]:
        rec = runs[i]
        with httpx.stream(
            "POST", rec.base_url + "/chat/completions", content=_chat(str(i)), headers=_headers(rec), timeout=120
        ) as r:
            return r.status_code, b"".join(r.iter_raw())

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(send, 0)]
        wait_for(lambda: _counts(gateway) == (0, 1), 30, "the first stream to hold the permit")
        for i in (1, 2, 3):
            futures.append(pool.submit(send, i))
            wait_for(lambda i=i: _counts(gateway) == (i, 1), 30, f"request {i} to wait")  # type: ignore[misc]
        answers = [f.result(120) for f in futures]
    assert [status for status, _ in answers] == [200, 200, 200, 200]
    assert all(body.rstrip().endswith(b"data: [DONE]") for _, body in answers)
    rows = [evidence_rows(gateway, rec.binding_id) for rec in runs]
    assert [len(rs) for rs in rows] == [1, 1, 1, 1]
    assert all(rs[0]["status"] in ("completed", "incomplete") and rs[0]["error_code"] is None for rs in rows)
    assert [rs[0]["admitted_seq"] for rs in rows] == [1, 2, 3, 4]  # served in arrival order
    assert _posted(engine, lock, ["0", "1", "2", "3"]) == ["0", "1", "2", "3"]
    assert all(rs[0]["queue_ms"] is not None for rs in rows)


def test_a_queued_request_whose_client_leaves_is_removed_at_once(engine: Engine, gateway: GatewayThread) -> None:
    lock = make_lock(max_running=1)
    rec = gateway.register("run-leave", target_for(engine, lock))
    engine.faults("stall_mid_stream:t=2,after=1")
    headers = _headers(rec)

    def post(tag: str) -> int:
        return httpx.post(rec.base_url + "/chat/completions", content=_chat(tag), headers=headers, timeout=120).status_code

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        held = pool.submit(post, "held")
        wait_for(lambda: _counts(gateway) == (0, 1), 30, "the first request to hold the permit")
        leaving = RawStream(rec.base_url, token_of(rec), "/chat/completions", json.loads(_chat("leaves")))
        wait_for(lambda: _counts(gateway) == (1, 1), 30, "the second request to wait")
        leaving.close()
        wait_for(lambda: _counts(gateway) == (0, 1), 30, "the departed request to leave the queue")
        third = pool.submit(post, "third")
        assert (held.result(120), third.result(120)) == (200, 200)
    rows = evidence_rows(gateway, rec.binding_id)
    gone = [r for r in rows if r["status"] == "cancelled"]
    assert len(gone) == 1 and gone[0]["http_status"] == 499 and gone[0]["admitted_seq"] is None
    assert _posted(engine, lock, ["held", "leaves", "third"]) == ["held", "third"]  # the departed one never reached it
    [queue] = gateway.gw.queues.values()
    assert (queue.acquired, queue.released, queue.repeat_releases, queue.in_use) == (2, 2, 0, 0)
