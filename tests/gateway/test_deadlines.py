"""Deadlines and the stream idle timeout through a real gateway (issue 28 item 3, spec §9.2).

- A run's deadline (``deadline_s`` at registration) starts at its first request; each request's timeout is
  min(time left, the lock's request timeout), a wait in the queue spends it too, and once it is spent every
  request is refused before the engine with ``inference_deadline_exceeded``.
- A stream whose engine goes quiet for the lock's ``stream_idle_timeout_ms`` ends with a terminal error event
  in the API's own shape (and a clean end); the evidence row says ``inference_stream_idle_timeout``.
"""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any

import httpx
import pytest

from fixtures.process_faults import wait_for
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, target_for, token_of

pytestmark = pytest.mark.integration


def _auth(rec: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_of(rec)}"}


def _chat(stream: bool) -> dict[str, Any]:
    return {"model": "tiny-wire", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 32, "stream": stream}


def _stream(rec: Any, route: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """(status, the whole body): raises if the stream did not end cleanly (chunked terminator)."""
    with httpx.stream("POST", rec.base_url + route, json=body, headers=_auth(rec), timeout=120) as r:
        return r.status_code, b"".join(r.iter_raw())


def _events(raw: bytes) -> list[bytes]:
    return [e for e in raw.split(b"\n\n") if e.strip()]


def test_without_a_deadline_a_request_has_the_locks_timeout(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-plain", target_for(engine, make_lock()))
    assert httpx.post(rec.base_url + "/chat/completions", json=_chat(False), headers=_auth(rec), timeout=60).status_code == 200
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["timeout_ms"], row["deadline_left_ms"]) == (600_000, None)
    assert rec.deadline_s is None


def test_a_stream_outliving_the_runs_deadline_ends_with_an_error_event_then_everything_is_refused(
    engine: Engine, gateway: GatewayThread
) -> None:
    rec = gateway.register("run-deadline", target_for(engine, make_lock()), deadline_s=2.0)
    assert rec.deadline_s == 2.0
    engine.faults("stall_mid_stream:t=30,after=2")  # the stream would run far past the deadline
    status, raw = _stream(rec, "/chat/completions", _chat(True))
    events = _events(raw)
    assert status == 200 and events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].split(b"data: ", 1)[1])["error"]
    assert (error["code"], error["type"]) == ("inference_deadline_exceeded", "server_error")
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["status"], row["error_code"]) == ("failed", "inference_deadline_exceeded")
    assert row["timeout_ms"] <= 2000 and row["deadline_left_ms"] == 2000  # the first request starts the clock
    assert row["abort_outcome"] == "free"  # the engine was told (connection closed) and freed the slot
    engine.faults()
    r = httpx.post(rec.base_url + "/chat/completions", json=_chat(False), headers=_auth(rec), timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (504, "inference_deadline_exceeded")
    assert len(engine.posts()) == 1  # refused before the engine


def test_a_wait_in_the_queue_spends_the_deadline(engine: Engine, gateway: GatewayThread) -> None:
    lock = make_lock(max_running=1)
    holder = gateway.register("run-holder", target_for(engine, lock))
    late = gateway.register("run-late", target_for(engine, lock), deadline_s=1.0)
    engine.faults("stall_mid_stream:t=4,after=1")  # the holder keeps the only permit past the late run's deadline
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(_stream, holder, "/chat/completions", _chat(True))
        wait_for(lambda: gateway.call(lambda: sum(q.in_use for q in gateway.gw.queues.values())) == 1, 30, "the holder")
        r = httpx.post(late.base_url + "/chat/completions", json=_chat(False), headers=_auth(late), timeout=60)
        assert held.result(120)[0] == 200
    assert (r.status_code, r.json()["error"]["code"]) == (504, "inference_deadline_exceeded")  # not queue_timeout (30 s)
    [row] = evidence_rows(gateway, late.binding_id)
    assert (row["status"], row["admitted_seq"]) == ("rejected", None)


@pytest.mark.parametrize("route", ["/chat/completions", "/responses"])
def test_a_stream_that_goes_quiet_ends_at_the_locks_idle_timeout(engine: Engine, gateway: GatewayThread, route: str) -> None:
    rec = gateway.register("run-idle", target_for(engine, make_lock(stream_idle_ms=700)))
    engine.faults("stall_mid_stream:t=60,after=2")
    body = _chat(True) if route == "/chat/completions" else {"model": "tiny-wire", "input": "hello", "stream": True}
    status, raw = _stream(rec, route, body)  # a clean end, never a broken stream
    events = _events(raw)
    assert status == 200
    if route == "/chat/completions":
        assert events[-1] == b"data: [DONE]"
        error = json.loads(events[-2].split(b"data: ", 1)[1])["error"]
        assert error["code"] == "inference_stream_idle_timeout"
    else:
        name, data = events[-1].split(b"\n", 1)
        failed = json.loads(data.split(b"data: ", 1)[1])
        assert name == b"event: response.failed" and failed["type"] == "response.failed"
        assert failed["response"]["status"] == "failed" and failed["response"]["error"]["code"] == "inference_stream_idle_timeout"
        assert failed["response"]["id"].startswith("resp_")  # the engine's response id
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["status"], row["error_code"], row["abort_outcome"]) == ("failed", "inference_stream_idle_timeout", "free")
    assert engine.state()["num_running_reqs"] == 0  # the engine was told: its slot is free
