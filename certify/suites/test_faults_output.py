"""faults (engine output): the engine's answer arrives split at every byte, coalesced, with an in-band error, or
too large.

On the fake engine each check uses the fake's fault mode; on real SGLang the fault proxy between a private
gateway and the session's engine changes the real engine's bytes the same way (see
:mod:`certify.kit.faults`). Both assert the same outcome: what the client receives, the evidence
row, nothing left held, and the same front serving again once the fault is cleared.
"""

from __future__ import annotations

from typing import Any

import pytest

from certify.kit.faults import MODE_CHECKS, FaultSite, fault_kind, fault_summary, row
from certify.kit.requests import chat_body
from certify.registry import check
from fixtures.fault_proxy import FaultProxy, ProxyFault
from gateway.sse import parse_events

pytestmark = pytest.mark.exclusive_engine  # on SGLang every check here sends through the session's engine

_fault_kind = fault_kind("output")


def _last_post(proxy: FaultProxy) -> Any:
    return [e for e in proxy.exchanges() if e.method == "POST" and e.path.startswith("/v1/")][-1]


@check(
    MODE_CHECKS["split_utf8"],
    description="the answer split at every byte (multibyte characters too) reaches the client whole, evidence ok",
    summary=fault_summary,
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


@check(
    MODE_CHECKS["coalesce_events"], description="several SSE events in one write are parsed and counted", summary=fault_summary
)
def test_coalesce_events(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front() as front:
        front.arm(("coalesce_events:n=4",), (ProxyFault(mode="coalesce", n=4),))
        body = {"model": front.wire_model, "input": "hello", "max_output_tokens": 6, "stream": True}
        status, raw, broken = front.stream("/responses", body)
        assert (status, broken) == (200, False)
        events = parse_events(raw)
        last = events[-1].json()
        usage = last["response"]["usage"]
        got = row(front.rows())
        front.record(certify_record, {"status": status, "broken": broken, "events": len(events)}, got)
        if front.proxy is not None:
            ex = _last_post(front.proxy)
            assert ex.faults == ["coalesce"] and 0 < ex.client_writes < len(events)  # several events per write
        assert got["status"] in ("completed", "incomplete") and got["output_tokens"] == usage["output_tokens"]
        assert got["engine_rid"] == last["response"]["id"]
        front.recovered(certify_record)


@check(
    "faults.inband_error.{api}",
    params={"api": ("chat", "responses")},
    description="{api}: HTTP 200 then an in-band error: evidence failed, not retried",
    summary=fault_summary,
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


@check(
    MODE_CHECKS["oversized_response"], description="an answer over the response cap: 502, evidence failed", summary=fault_summary
)
def test_oversized_response(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front(private=True) as front:
        front.arm(("oversized_response:mb=2",), (ProxyFault(mode="oversized", size=2 << 20),))  # the cap is 1 MiB
        front.bad_gateway(certify_record)
