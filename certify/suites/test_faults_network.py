"""faults (network): the connection to the engine is cut mid-event, reset, slow to answer, or the client leaves.

On the fake engine each check uses the fake's fault mode; on real SGLang the fault proxy between a private
gateway and the session's engine causes the same fault on the real engine's bytes (see
:mod:`certify.kit.faults`). Both assert the same outcome: what the client receives (status, our
error code, a broken or clean stream), the evidence row (status, error code), nothing left held, and the same
front serving again once the fault is cleared.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from certify.kit.daemon import PrivateDaemon
from certify.kit.faults import (
    FAKE,
    MODE_CHECKS,
    SHORT_TIMEOUT_MS,
    FaultSite,
    failed_event,
    fault_kind,
    fault_summary,
    revoked,
    row,
    sealed_inference_id,
    serves,
)
from certify.kit.probes import engine_load, wait_until
from certify.kit.requests import chat_body
from certify.kit.stack import queue_counts
from certify.kit.streams import RawStream, client_gone
from certify.registry import check
from certify.session import CertifyEnv, RunHandle
from fixtures.fault_proxy import ProxyFault
from gateway.aborts import ServiceFault

pytestmark = pytest.mark.exclusive_engine  # on SGLang every check here sends through the session's engine

_fault_kind = fault_kind("network")
ABORT_BOUND_MS = 2000  # the check's lock: how long the engine has to show an aborted request's slot free
IDLE_TIMEOUT_MS = 3000  # the check's lock: a stream silent this long is ended (a short prompt's prefill is far less)


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
    "faults.stall_mid_stream.idle_timeout",
    description="the engine goes quiet mid-stream past the lock's stream idle timeout: the client gets a terminal "
    "error event and a clean end, the evidence row says inference_stream_idle_timeout, the engine slot is freed "
    "(SGLang: the fault proxy stalls the real engine's stream)",
    summary=fault_summary,
)
def test_stall_past_the_idle_timeout(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front(private=True, execution={"stream_idle_timeout_ms": IDLE_TIMEOUT_MS}) as front:
        front.arm(("stall_mid_stream:t=30,after=2",), (ProxyFault(mode="stall", after_events=2),))
        status, raw, broken = front.chat_stream()
        events = [e for e in raw.split(b"\n\n") if e.strip()]
        got = row(front.rows())
        error = json.loads(events[-2].split(b"data: ", 1)[1]).get("error", {}) if len(events) >= 2 else {}
        front.record(certify_record, {"status": status, "broken": broken, "last_event": events[-1:], "error": error}, got)
        certify_record.detail("stream_idle_timeout_ms", IDLE_TIMEOUT_MS)
        assert (status, broken) == (200, False), "the gateway ends the stream itself: a terminal event, a clean end"
        assert events[-1] == b"data: [DONE]" and error.get("code") == "inference_stream_idle_timeout", events[-2:]
        assert (got["status"], got["error_code"], got["abort_outcome"]) == ("failed", "inference_stream_idle_timeout", "free")
        front.recovered(certify_record)


@check(
    MODE_CHECKS["ignore_aborts"],
    description="an engine that keeps an aborted request's slot: the permit is never handed on, the epoch admits "
    "nothing more, its requests drain and the fault is reported (SGLang: the fault proxy keeps the engine's "
    "connection after the gateway closed its own, so the real engine's request runs on; ignore_eos keeps it "
    "running past the bound on any device)",
    summary=lambda d: (
        f"the client left mid-stream and the engine kept the request running ({d['engine_load_after_verdict']} busy): "
        f"the permit was not handed on, the evidence row says cancelled ({d['evidence']['error_code']}), the service "
        f"fault was reported and the next request got {d['next_request']['status']} {d['next_request']['code']}"
    ),
)
def test_ignore_aborts(fault_site: FaultSite, certify_record: Any) -> None:
    execution = {"abort_confirm_timeout_ms": ABORT_BOUND_MS, "max_running_requests": 1}
    # the request must outlive the bound on a fast device too: no stop at EOS, the lock's whole output budget
    generation = {"benchmark_controls": ["ignore_eos"]}
    with fault_site.front(private=True, execution=execution, generation=generation) as front:
        gw = front.gateway
        assert gw is not None
        reported: list[ServiceFault] = []
        gw.call(lambda: setattr(gw.gw.aborts, "on_service_fault", reported.append))
        front.arm(
            ("ignore_aborts", "stall_mid_stream:t=30,after=2"), (ProxyFault(mode="stall", after_events=2, keep_upstream=True),)
        )
        body = chat_body(front.wire_model, stream=True, max_tokens=None, content="Tell a long story.") | {"ignore_eos": True}
        stream = RawStream(front.base_url, front.token, "/chat/completions", body)
        try:
            stream.read_events(2)
            assert stream.status == 200 and not stream.done_seen, stream.raw[-300:]
        finally:
            stream.close()  # the client goes away mid-stream: the gateway aborts (closes its engine connection)
        got = row(front.rows())  # written once the engine's slot had its verdict
        front.record(certify_record, {"status": stream.status, "closed_by_client": True}, got)
        certify_record.detail("abort_outcome", got["abort_outcome"])
        fault = wait_until(lambda: reported[0] if reported else None, 60.0, what="the service fault to be reported")
        certify_record.detail("fault", {"code": fault.error.code, "epoch": fault.epoch, "drained": fault.drained})
        busy = engine_load(front.engine_url, front.engine_key_headers)
        certify_record.detail("engine_load_after_verdict", busy)
        again = httpx.post(
            front.base_url + "/chat/completions",
            json=chat_body(front.wire_model, stream=False),
            headers=front.headers(),
            timeout=60,
        )
        certify_record.detail("next_request", {"status": again.status_code, "code": again.json()["error"]["code"]})
        acquired, released, _, in_use = queue_counts(gw)
        assert (got["status"], got["error_code"], got["abort_outcome"]) == (
            "cancelled",
            "inference_abort_unconfirmed",
            "unconfirmed",
        )
        assert (fault.error.code, fault.drained) == ("inference_abort_unconfirmed", True)
        assert busy >= 1, "the engine no longer runs the aborted request: nothing was ignored"
        assert (again.status_code, again.json()["error"]["code"]) == (503, "inference_abort_unconfirmed")
        assert (acquired, released, in_use) == (1, 0, 1), "the aborted request's permit was handed on"
        assert front.upstream_posts() == 1  # nothing else reached the engine
        front.clear()  # the proxy lets the engine's connection go: SGLang aborts the request
        if front.proxy is not None:
            front.engine_idle()


@check(
    "faults.ignore_aborts.service_restarted",
    engines=FAKE,
    description="an engine that keeps an aborted request's slot: the daemon fails the epoch "
    "(inference_abort_unconfirmed), revokes its bindings, stops the engine; the run's evidence says so and a "
    "new run gets a new epoch",
    reason="a daemon's upstream is the engine its service record names, so the fault proxy cannot stand between "
    "the daemon's gateway and a real engine, and SGLang itself honours aborts; the gateway's part is checked on "
    "real SGLang by faults.ignore_aborts.slot_unconfirmed (the proxy keeps the aborted request running there)",
    summary=lambda d: (
        f"the engine kept an abandoned request's slot: the service failed with {d['failed_event']['code']}, the run's "
        f"token got {d['client']['status']} {d['client']['code']}, its evidence says "
        f"{d['evidence'][0]['status']} ({d['evidence'][0]['error_code']}), and a new run got epoch {d['epochs'][1]} "
        f"after {d['epochs'][0]}"
    ),
)
def test_ignore_aborts_restarts_the_service(private_daemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = private_daemon
    lock = daemon.sealed_lock(sealed_inference_id(daemon))
    variant = daemon.seal_variant(lock, execution={"abort_confirm_timeout_ms": ABORT_BOUND_MS})
    # its own engine, launched ignoring aborts and slow enough that a stream is still running when its client leaves
    flags = ["--fault", "ignore_aborts", "--fake-itl-ms", "200"]
    run = daemon.create_run(inference_id=variant.inference_id, fake_flags=flags)
    again: RunHandle | None = None
    try:
        engine = daemon.engine_target(run.service_id)
        assert engine is not None
        stream = RawStream(run.base_url, run.token, "/chat/completions", chat_body(run.wire_model, stream=True, max_tokens=64))
        try:
            stream.read_events(2)
            assert stream.status == 200 and not stream.done_seen
        finally:
            stream.close()
        failed = failed_event(daemon, run.service_id, run.epoch, timeout_s=60.0)
        gone = revoked(run)
        wait_until(lambda: not engine.alive(), 30.0, what="the engine stopped")
        record = daemon.record(run.service_id)
        daemon.delete_run(run)  # the run ends: its evidence is written
        attempts = daemon.root.runs / run.run_id / "inference" / "attempts.jsonl"
        rows = [json.loads(line) for line in attempts.read_text(encoding="utf-8").splitlines()]
        again = daemon.create_run(inference_id=variant.inference_id, fake_flags=flags)
        served = serves(again.base_url, again.headers(), again.wire_model)
        certify_record.detail("failed_event", failed)
        certify_record.detail("client", gone)
        certify_record.detail("evidence", [{k: r.get(k) for k in ("status", "error_code", "abort_outcome")} for r in rows])
        certify_record.detail("epochs", [run.epoch, again.epoch])
        assert failed.get("code") == "inference_abort_unconfirmed", failed
        assert record is not None and record.state == "failed" and record.error_code == "inference_abort_unconfirmed"
        assert gone == {"status": 403, "code": "inference_binding_revoked"}
        assert [(r["status"], r["error_code"], r["abort_outcome"]) for r in rows] == [
            ("cancelled", "inference_abort_unconfirmed", "unconfirmed")
        ]
        assert again.service_id == run.service_id and again.epoch > run.epoch and served == 200
    finally:
        daemon.stop_service(run.service_id)


@pytest.mark.quiet
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
