"""faults (network): the connection to the engine is cut mid-event, reset, slow to answer, or the client leaves.

On the fake engine each check uses the fake's fault mode; on real SGLang the fault proxy between a private
gateway and the session's engine causes the same fault on the real engine's bytes (see
:mod:`certify.kit.faults`). Both assert the same outcome: what the client receives (status, our
error code, a broken or clean stream), the evidence row (status, error code), nothing left held, and the same
front serving again once the fault is cleared.
"""

from __future__ import annotations

from typing import Any

import pytest

from certify.kit.faults import FAKE, MODE_CHECKS, SHORT_TIMEOUT_MS, FaultSite, fault_kind, fault_summary, row, serves
from certify.kit.probes import engine_load
from certify.kit.requests import chat_body
from certify.kit.streams import RawStream, client_gone
from certify.registry import check
from certify.session import CertifyEnv
from fixtures.fault_proxy import ProxyFault

pytestmark = pytest.mark.exclusive_engine  # on SGLang every check here sends through the session's engine

_fault_kind = fault_kind("network")


@check(
    MODE_CHECKS["partial_event_close"],
    description="half an event then close: broken client stream, evidence failed",
    summary=fault_summary,
)
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
    MODE_CHECKS["connection_reset"], description="TCP reset mid-stream: broken client stream, slot freed", summary=fault_summary
)
def test_connection_reset(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front() as front:
        front.arm(("connection_reset:after=2",), (ProxyFault(mode="reset", after_events=2),))
        status, _, broken = front.chat_stream()
        got = row(front.rows())
        front.record(certify_record, {"status": status, "broken": broken}, got)
        assert (status, broken) == (200, True)
        assert (got["status"], got["error_code"]) == ("failed", "inference_upstream_failed")
        front.recovered(certify_record)


@check(
    MODE_CHECKS["slow_headers"], description="no status line before the request timeout: 502, slot freed", summary=fault_summary
)
def test_slow_headers(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front(private=True, timeout_ms=SHORT_TIMEOUT_MS) as front:
        front.arm(("slow_headers:t=30",), (ProxyFault(mode="latency", delay_s=3600),))
        front.bad_gateway(certify_record)


@check(
    MODE_CHECKS["ignore_aborts"],
    engines=FAKE,
    description="an engine that ignores aborts: the gateway permit is still released once",
    reason="SGLang honours an abort (a closed connection ends its request) and the fault proxy passes a client's "
    "close on to it, so a real engine cannot be made to keep the slot; the gateway side is the same code either way",
    summary=fault_summary,
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
        assert state["leaked_slots"] == 1 and engine_load(front.engine_url, front.engine_key_headers) == 1


@check(
    "faults.client_disconnect.upstream_aborted",
    description="client gone mid-stream: engine request aborted, permit freed",
    summary=fault_summary,
)
def test_client_disconnect(certify_env: CertifyEnv, certify_record: Any) -> None:
    env = certify_env
    with client_gone(env) as gone:
        certify_record.metric("disconnect_slot_free_ms", round(gone.freed_ms, 1))
        certify_record.detail("engine_load_before_close", gone.busy)
        certify_record.detail("client", {"status": 200, "closed_by_client": True})
        certify_record.detail("evidence", {k: gone.row.get(k) for k in ("status", "error_code", "http_status")})
        certify_record.detail("recovery_ms", round(gone.freed_ms, 1))
        assert gone.row["status"] == "cancelled" and gone.row["error_code"] is None
        assert gone.freed_ms <= 5000, f"the engine slot was freed {gone.freed_ms:.0f} ms after the client went away"
        if env.fake is not None:
            assert env.fake.state()["num_aborted_requests"] >= 1
        assert serves(gone.run.base_url, gone.run.headers(), gone.run.wire_model) == 200  # the gateway permit is free again
