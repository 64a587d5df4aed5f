"""No faked cancel (issue 28 item 2, spec §9.2): an abandoned request's permit moves on only once the engine
shows its slot free; an engine that keeps the slot puts the service epoch into fault handling.

A real gateway in front of the fake engine. The client leaves mid-stream by closing its socket; with the fake's
``ignore_aborts`` fault the engine keeps that request's slot (``num_running_reqs`` stays up), as an engine
that ignores an abort would.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import httpx
import pytest

from certify.kit.streams import RawStream
from fixtures.process_faults import wait_for
from gateway.aborts import ServiceFault
from gateway.server import GatewayConfig
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, start_engine, target_for, token_of

pytestmark = pytest.mark.integration


def _chat(stream: bool = True) -> dict[str, Any]:
    return {"model": "tiny-wire", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 32, "stream": stream}


def _leave_mid_stream(rec: Any) -> None:
    """Open a stream, read two events, close the socket (the client is gone)."""
    stream = RawStream(rec.base_url, token_of(rec), "/chat/completions", _chat())
    try:
        stream.read_events(2)
        assert stream.status == 200 and not stream.done_seen, stream.raw
    finally:
        stream.close()


def _queue(gt: GatewayThread) -> Any:
    [queue] = gt.gw.queues.values()
    return queue


def test_a_cancel_releases_the_permit_only_once_the_engine_shows_the_slot_free(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-cancel", target_for(engine, make_lock(max_running=1)))
    engine.faults("stall_mid_stream:t=30,after=2")
    _leave_mid_stream(rec)
    [row] = evidence_rows(gateway, rec.binding_id)  # written once the engine's verdict is in
    assert (row["status"], row["error_code"], row["abort_outcome"]) == ("cancelled", None, "free")
    assert row["abort_confirm_ms"] is not None
    paths = [(r["method"], r["path"]) for r in engine.received()]
    assert paths[0] == ("POST", "/v1/chat/completions") and ("GET", "/v1/loads") in paths[1:]  # it asked the engine
    assert engine.state()["num_running_reqs"] == 0
    queue = _queue(gateway)
    assert (queue.acquired, queue.released, queue.kept, queue.in_use, queue.at_engine) == (1, 1, 0, 0, 0)
    assert gateway.gw.aborts.faults == []
    engine.faults()
    r = httpx.post(rec.base_url + "/chat/completions", json=_chat(False), headers={"Authorization": f"Bearer {token_of(rec)}"})
    assert r.status_code == 200


@pytest.fixture
def leaky(tiny_model: Path, tmp_path: Path) -> Any:
    engine = start_engine(tiny_model, tmp_path / "leaky", "--fault", "ignore_aborts", max_running=1)
    try:
        yield engine
    finally:
        engine.stop()


def test_an_engine_that_keeps_an_aborted_slot_faults_the_service_and_nothing_else_is_admitted(
    leaky: Engine, tmp_path: Path
) -> None:
    reported: list[ServiceFault] = []
    config = GatewayConfig(state_dir=tmp_path / "gw", metrics_port=None)
    with GatewayThread(config) as gt:
        gt.gw.aborts.on_service_fault = reported.append
        lock = make_lock(max_running=1, abort_confirm_ms=1500)
        rec = gt.register("run-leak", target_for(leaky, lock, service_id="svc-leak", epoch=3))
        other = gt.register("run-other", target_for(leaky, lock, service_id="svc-leak", epoch=3))
        leaky.faults("ignore_aborts", "stall_mid_stream:t=30,after=2")
        headers = {"Authorization": f"Bearer {token_of(other)}"}
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            _leave_mid_stream(rec)
            wait_for(lambda: leaky.state()["leaked_slots"] == 1, 30, "the engine to keep the aborted slot")
            # another run's request waits: the permit is not handed on while the slot is not shown free
            waiting = pool.submit(
                lambda: httpx.post(other.base_url + "/chat/completions", json=_chat(False), headers=headers, timeout=60)
            )
            wait_for(lambda: gt.call(lambda: _queue(gt).waiting) == 1 or waiting.done(), 30, "the other run's request to wait")
            r = waiting.result(60)
        assert (r.status_code, r.json()["error"]["code"]) == (503, "inference_abort_unconfirmed")
        wait_for(lambda: bool(reported), 30, "the fault to be reported")
        [fault] = reported
        assert (fault.service_id, fault.epoch, fault.error.code, fault.drained) == (
            "svc-leak",
            3,
            "inference_abort_unconfirmed",
            True,
        )
        [row] = evidence_rows(gt, rec.binding_id)
        assert (row["status"], row["error_code"], row["abort_outcome"]) == (
            "cancelled",
            "inference_abort_unconfirmed",
            "unconfirmed",
        )
        assert row["abort_confirm_ms"] is None
        [refused] = evidence_rows(gt, other.binding_id)
        assert (refused["status"], refused["error_code"]) == ("rejected", "inference_abort_unconfirmed")
        again = httpx.post(other.base_url + "/chat/completions", json=_chat(False), headers=headers, timeout=60)
        assert (again.status_code, again.json()["error"]["code"]) == (503, "inference_abort_unconfirmed")  # no new admission
        queue = _queue(gt)
        assert (queue.acquired, queue.released, queue.kept, queue.in_use) == (1, 0, 1, 1)  # the slot's permit is never handed on
        assert len(leaky.posts()) == 1  # only the abandoned request ever reached the engine


def test_the_metrics_show_an_abandoned_request_while_its_slot_verdict_is_awaited(leaky: Engine, tmp_path: Path) -> None:
    """``hitch_gateway_aborts_confirming``: what an operator (or the Harbor cancel check on a paused engine) reads
    to know the gateway let a request go and holds its permit until the engine shows the slot free."""
    series = 'hitch_gateway_aborts_confirming{service="svc-leak#4"} '
    config = GatewayConfig(state_dir=tmp_path / "gw", metrics_port=0)
    with GatewayThread(config) as gt:
        rec = gt.register(
            "run-leak", target_for(leaky, make_lock(max_running=1, abort_confirm_ms=120_000), service_id="svc-leak", epoch=4)
        )
        metrics_url = gt.gw.metrics_url
        assert metrics_url is not None
        leaky.faults("ignore_aborts", "stall_mid_stream:t=30,after=2")
        _leave_mid_stream(rec)
        wait_for(lambda: series + "1" in httpx.get(metrics_url).text.splitlines(), 30, "the gauge to show the abandoned request")
        assert gt.call(lambda: _queue(gt).in_use) == 1  # the permit is held meanwhile
    assert gt.gw.aborts.by_service[("svc-leak", 4)] == 0  # shut down: no verdict awaited any more
