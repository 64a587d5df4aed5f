"""faults (network): the engine's bytes arrive split, coalesced, cut, reset, late, oversized or with an error.

On the fake engine each check uses the fake's fault mode; on real SGLang the fault proxy between a private
gateway and the session's engine causes the same fault on the real engine's bytes (see
:mod:`certify.suites._support_faults`). Both assert the same outcome: what the client receives (status, our
error code, a broken or clean stream), the evidence row (status, error code), nothing left held, and the same
front serving again once the fault is cleared.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from certify.registry import check
from certify.session import CertifyEnv
from certify.suites._support_engines import RawStream, chat_body, close_held_stream, engine_running, evidence_rows
from certify.suites._support_faults import (
    FAKE,
    MODE_CHECKS,
    SHORT_TIMEOUT_MS,
    FaultFront,
    FaultSite,
    engine_proxy_fixture,  # noqa: F401 (the fixture ``engine_proxy``)
    fault_kind,
    fault_site_fixture,  # noqa: F401 (the fixture ``fault_site``)
    gateway_dir,
    row,
    serves,
)
from fixtures.fault_proxy import FaultProxy, ProxyFault

pytestmark = pytest.mark.exclusive_engine  # on SGLang every check here sends through the session's engine

_fault_kind = fault_kind("network")


def _last_post(proxy: FaultProxy) -> Any:
    return [e for e in proxy.exchanges() if e.method == "POST" and e.path.startswith("/v1/")][-1]


@check(
    MODE_CHECKS["split_utf8"],
    description="the answer split at every byte (multibyte characters too) reaches the client whole, evidence ok",
)
def test_split_utf8(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front() as front:
        front.arm(("split_utf8",), (ProxyFault(mode="slice", k=1),))
        status, raw, broken = front.chat_stream()
        assert (status, broken) == (200, False)
        text = raw.decode("utf-8")  # strict: whole characters only
        assert raw.endswith(b"data: [DONE]\n\n")
        if front.proxy is None:
            assert "é漢🙂" in text
        else:
            ex = _last_post(front.proxy)
            assert ex.faults == ["slice"] and ex.client_writes == ex.client_bytes  # every byte its own write
        got = row(front.rows())
        front.record(
            certify_record, {"status": status, "broken": broken, "non_ascii_chars": sum(ord(c) > 127 for c in text)}, got
        )
        assert got["status"] in ("completed", "incomplete") and got["error_code"] is None and got["ttft_ms"] is not None
        front.recovered(certify_record)


@check(MODE_CHECKS["coalesce_events"], description="several SSE events in one write are parsed and counted")
def test_coalesce_events(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front() as front:
        front.arm(("coalesce_events:n=4",), (ProxyFault(mode="coalesce", n=4),))
        body = {"model": front.wire_model, "input": "hello", "max_output_tokens": 6, "stream": True}
        status, raw, broken = front.stream("/responses", body)
        assert (status, broken) == (200, False)
        events = [e for e in raw.split(b"\n\n") if e.strip()]
        last = json.loads(events[-1].split(b"data: ", 1)[1])
        usage = last["response"]["usage"]
        got = row(front.rows())
        front.record(certify_record, {"status": status, "broken": broken, "events": len(events)}, got)
        if front.proxy is not None:
            ex = _last_post(front.proxy)
            assert ex.faults == ["coalesce"] and 0 < ex.client_writes < len(events)  # several events per write
        assert got["status"] in ("completed", "incomplete") and got["output_tokens"] == usage["output_tokens"]
        assert got["engine_rid"] == last["response"]["id"]
        front.recovered(certify_record)


@check(MODE_CHECKS["partial_event_close"], description="half an event then close: broken client stream, evidence failed")
def test_partial_event_close(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front() as front:
        front.arm(("partial_event_close",), (ProxyFault(mode="close", after_bytes=20),))  # inside the first event
        status, _, broken = front.chat_stream()
        got = row(front.rows())
        front.record(certify_record, {"status": status, "broken": broken}, got)
        assert (status, broken) == (200, True), "the client must see a broken stream, never a clean end"
        assert (got["status"], got["error_code"]) == ("failed", "inference_upstream_failed")
        front.recovered(certify_record)


@check(
    "faults.inband_error.{api}",
    params={"api": ("chat", "responses")},
    description="{api}: HTTP 200 then an in-band error: evidence failed, not retried",
)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_inband_error(fault_site: FaultSite, certify_record: Any, api: str) -> None:
    with fault_site.front() as front:
        front.arm(("inband_error:after=2",), (ProxyFault(mode="inband_error", after_events=2),))
        if api == "chat":
            route, body = "/chat/completions", chat_body(front.wire_model, stream=True)
        else:
            route, body = "/responses", {"model": front.wire_model, "input": "hi", "stream": True}
        status, raw, broken = front.stream(route, body)
        got = row(front.rows())
        front.record(certify_record, {"status": status, "broken": broken, "error_event": b'"error"' in raw}, got)
        assert status == 200
        assert b'"error"' in raw or b"response.failed" in raw, "the in-band error must reach the client"
        assert (got["status"], got["error_code"]) == ("failed", "inference_upstream_failed")
        assert front.upstream_posts() == 1, "a POST is never retried"
        front.recovered(certify_record)


@check(MODE_CHECKS["connection_reset"], description="TCP reset mid-stream: broken client stream, slot freed")
def test_connection_reset(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front() as front:
        front.arm(("connection_reset:after=2",), (ProxyFault(mode="reset", after_events=2),))
        status, _, broken = front.chat_stream()
        got = row(front.rows())
        front.record(certify_record, {"status": status, "broken": broken}, got)
        assert (status, broken) == (200, True)
        assert (got["status"], got["error_code"]) == ("failed", "inference_upstream_failed")
        front.recovered(certify_record)


def _unary_bad_gateway(front: FaultFront, certify_record: Any) -> None:
    """A unary request the fault ends before an answer: 502 inference_upstream_failed, evidence failed, recovered."""
    r = front.unary_chat()
    got = row(front.rows())
    front.record(certify_record, {"status": r.status_code, "code": r.json()["error"]["code"]}, got)
    assert (r.status_code, r.json()["error"]["code"]) == (502, "inference_upstream_failed")
    assert (got["status"], got["error_code"]) == ("failed", "inference_upstream_failed")
    front.recovered(certify_record)


@check(MODE_CHECKS["slow_headers"], description="no status line before the request timeout: 502, slot freed")
def test_slow_headers(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front(private=True, timeout_ms=SHORT_TIMEOUT_MS) as front:
        front.arm(("slow_headers:t=30",), (ProxyFault(mode="latency", delay_s=3600),))
        _unary_bad_gateway(front, certify_record)


@check(MODE_CHECKS["oversized_response"], description="an answer over the response cap: 502, evidence failed")
def test_oversized_response(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front(private=True) as front:
        front.arm(("oversized_response:mb=2",), (ProxyFault(mode="oversized", size=2 << 20),))  # the cap is 1 MiB
        _unary_bad_gateway(front, certify_record)


@check(
    MODE_CHECKS["ignore_aborts"],
    engines=FAKE,
    description="an engine that ignores aborts: the gateway permit is still released once",
    reason="SGLang honours an abort (a closed connection ends its request) and the fault proxy passes a client's "
    "close on to it, so a real engine cannot be made to keep the slot; the gateway side is the same code either way",
)
def test_ignore_aborts(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front(private=True, timeout_ms=SHORT_TIMEOUT_MS) as front:
        front.arm(("ignore_aborts", "stall_mid_stream:t=30,after=2"), ())
        stream = RawStream(front.base_url, front.token, "/chat/completions", chat_body(front.wire_model, stream=True))
        try:
            stream.read_events(2)
            assert stream.status == 200
        finally:
            stream.close()
        got = row(front.rows())
        front.record(certify_record, {"status": stream.status, "closed_by_client": True}, got)
        assert got["status"] == "cancelled"
        front.permits_released(1)
        state = front.fake.state()
        certify_record.detail("engine_leaked_slots", state["leaked_slots"])
        # The leak stays visible to a saturation monitor: the engine reports a running request that nobody holds.
        assert state["leaked_slots"] == 1 and engine_running(front.engine_url, front.engine_key_headers) == 1


@check("faults.client_disconnect.upstream_aborted", description="client gone mid-stream: engine request aborted, permit freed")
def test_client_disconnect(certify_env: CertifyEnv, certify_record: Any) -> None:
    env = certify_env
    run = env.new_run()
    try:
        busy, freed_ms = close_held_stream(env, run)
        certify_record.metric("disconnect_slot_free_ms", round(freed_ms, 1))
        certify_record.detail("engine_load_before_close", busy)
        rows = evidence_rows(gateway_dir(env), run.binding_id)
        certify_record.detail("client", {"status": 200, "closed_by_client": True})
        certify_record.detail("evidence", {k: rows[-1].get(k) for k in ("status", "error_code", "http_status")})
        certify_record.detail("recovery_ms", round(freed_ms, 1))
        assert rows[-1]["status"] == "cancelled" and rows[-1]["error_code"] is None
        assert freed_ms <= 5000, f"the engine slot was freed {freed_ms:.0f} ms after the client went away"
        if env.fake is not None:
            assert env.fake.state()["num_aborted_requests"] >= 1
        assert serves(run.base_url, run.headers(), run.wire_model) == 200  # the gateway permit is free again
    finally:
        if env.fake is not None:
            env.fake.reset()
        env.delete_run(run)
