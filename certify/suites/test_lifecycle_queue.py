"""lifecycle (queue): several agents on one service, as evaluations run them (spec §8.3).

Four runs on one baseline service (one running request: the gateway's one permit) stream at once: the first is
held mid-stream (fake engine: its stall; real SGLang: the fault proxy holding the real engine's stream until it
is cleared), the other three wait in the gateway's own queue, in arrival order. A fifth request, past the
gateway's bound (set to 3 waiting for the check), is refused at once with 429 ``inference_queue_full``. Once
the hold ends, all four complete with 200, served in the order they arrived (their evidence rows'
``admitted_seq``), each within the lock's queue timeout. Every request is sent only once the one before it is
seen holding the permit or waiting: arrival order is certain, never a matter of timing.

A run's deadline (``lifecycle.queue.run_deadline``): a run registered with a candidate deadline streams while the
engine is held (fake: a stall; SGLang: the fault proxy) past it. The gateway ends the stream itself with a terminal
``inference_deadline_exceeded`` event (504 had no byte been sent yet), its evidence row says so with the request's
timeout (min(time left, the lock's request timeout)) and the time left when it started, the engine's slot is shown
free, and the run's next request is 504 at once without reaching the engine.

A private gateway (its own bound) before the session's engine; the runs share its one service queue.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from typing import Any

import httpx
import pytest

from certify.kit.faults import FaultSite, stream
from certify.kit.probes import evidence_rows, wait_until
from certify.kit.requests import chat_body
from certify.registry import check
from fixtures.fault_proxy import ProxyFault
from gateway.testing import GatewayThread

AGENTS = 4
DEADLINE_S = 8.0  # the check's run deadline: far above a short prompt's first token, far below the held stream
BOUND = AGENTS - 1  # waiting requests the check's gateway holds: the fifth request is one too many


def _waiting_in_use(gw: GatewayThread) -> tuple[int, int]:
    return gw.call(lambda: (sum(q.waiting for q in gw.gw.queues.values()), sum(q.in_use for q in gw.gw.queues.values())))


@pytest.mark.exclusive_engine
@check(
    "lifecycle.queue.agents_share",
    description="four runs stream at once on one baseline service: all 200 in FIFO order within the queue timeout; "
    "a fifth past the gateway's bound (3 waiting for the check) is 429 at once",
    summary=lambda d: (
        f"{sum(c['status'] == 200 for c in d['clients'])} runs streaming at once on one slot were all served in FIFO "
        f"order (longest queue wait {max(d['queue_ms']) / 1000:.1f} s of the {d['queue_timeout_ms'] / 1000:.0f} s "
        f"allowed); one past {d['max_waiting']} waiting got {d['fifth']['status']} {d['fifth']['code']} at once"
    ),
)
def test_agents_share_one_service(fault_site: FaultSite, certify_record: Any) -> None:
    execution = {"max_running_requests": 1}  # the baseline: one request at a time
    with fault_site.front(private=True, execution=execution, gateway_settings={"max_waiting": BOUND}) as front:
        gw = front.gateway
        assert gw is not None
        runs = [front.another_run(f"agent-{i}") for i in range(AGENTS)]
        lock = gw.call(lambda: gw.gw.registry.get(runs[0].binding_id)).target.lock  # type: ignore[union-attr]
        # hold the first stream mid-way (fake: a stall that only the first stream meets, the fault is cleared
        # before the others reach the engine; SGLang: a one-shot proxy stall, released when cleared)
        front.arm(("stall_mid_stream:t=10,after=1",), (ProxyFault(mode="stall", after_events=2),))
        # a waiting client hears nothing until its turn: its patience covers the queue and the request
        patience_s = (lock.execution.queue_timeout_ms + lock.execution.request_timeout_ms) / 1000
        with concurrent.futures.ThreadPoolExecutor(max_workers=AGENTS) as pool:
            futures = []
            for i, run in enumerate(runs):
                body = chat_body(run.wire_model, stream=True, max_tokens=4)
                futures.append(pool.submit(stream, run.base_url, "/chat/completions", body, run.headers(), patience_s))
                want = (i, 1)  # the first holds the permit; each later one waits behind it
                wait_until(lambda want=want: _waiting_in_use(gw) == want, 120.0, what=f"agent {i} to hold or wait")  # type: ignore[misc]
            first = runs[0]
            fifth = httpx.post(
                first.base_url + "/chat/completions", json=chat_body(first.wire_model, stream=True), headers=first.headers(),
                timeout=60,
            )  # fmt: skip
            front.clear()  # the held stream goes on
            answers = [f.result(patience_s * AGENTS) for f in futures]
        gw.settle_evidence()  # every exchange begun is on disk; the first run also holds the refused fifth's row
        rows = [evidence_rows(front.state_dir, run.binding_id, at_least=2 if i == 0 else 1) for i, run in enumerate(runs)]
    keep = ("status", "error_code", "http_status", "queue_ms", "admitted_seq")
    certify_record.detail("rows", [[{k: r.get(k) for k in keep} for r in rs] for rs in rows])
    certify_record.detail("clients", [{"status": s, "broken": b} for s, _, b in answers])
    unserved = [i for i, rs in enumerate(rows) if all(r["status"] == "rejected" for r in rs)]
    assert not unserved, f"agent(s) {unserved} were never served: {[rows[i] for i in unserved]}"
    served = [next(r for r in rs if r["status"] != "rejected") for rs in rows]
    refused = [r for rs in rows for r in rs if r["status"] == "rejected"]
    queue_ms = [round(r["queue_ms"], 1) for r in served]
    certify_record.detail("admitted_seq", [r["admitted_seq"] for r in served])
    certify_record.detail("queue_ms", queue_ms)
    certify_record.detail("queue_timeout_ms", lock.execution.queue_timeout_ms)
    certify_record.detail("max_waiting", BOUND)
    certify_record.detail("fifth", {"status": fifth.status_code, "code": fifth.json()["error"]["code"]})
    certify_record.metric("queue_wait_max_ms", max(queue_ms))
    assert [(s, b) for s, _, b in answers] == [(200, False)] * AGENTS
    assert all(r["status"] in ("completed", "incomplete") and r["error_code"] is None for r in served), served
    assert [r["admitted_seq"] for r in served] == list(range(1, AGENTS + 1)), "not served in arrival order"
    assert all(ms < lock.execution.queue_timeout_ms for ms in queue_ms)
    assert (fifth.status_code, fifth.json()["error"]["code"], fifth.headers.get("Retry-After")) == (
        429,
        "inference_queue_full",
        "1",
    )
    assert [(r["error_code"], r["admitted_seq"]) for r in refused] == [("inference_queue_full", None)]


@check(
    "lifecycle.queue.run_deadline",
    description="a run's deadline bounds its requests: a stream held past it ends with inference_deadline_exceeded "
    "(a terminal event, or 504 before the first byte), its evidence row carries the request's timeout and the time "
    "left, the engine slot is freed, and the run's next request is 504 at once, never forwarded",
    summary=lambda d: (
        f"a run whose deadline was {d['deadline_s']:.0f} s: its held stream ended with {d['first']['code']} after "
        f"{d['first_row']['timeout_ms'] / 1000:.1f} s (the request's timeout), the engine slot was "
        f"{d['first_row']['abort_outcome']}, and its next request got {d['next']['status']} {d['next']['code']} "
        "without reaching the engine"
    ),
)
def test_run_deadline(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front(private=True) as front:
        gw = front.gateway
        assert gw is not None
        run = front.another_run("deadline", deadline_s=DEADLINE_S)
        lock = gw.call(lambda: gw.gw.registry.get(run.binding_id)).target.lock  # type: ignore[union-attr]
        front.arm(("stall_mid_stream:t=60,after=1",), (ProxyFault(mode="stall", after_events=2),))
        body = chat_body(run.wire_model, stream=True)
        status, raw, broken = stream(run.base_url, "/chat/completions", body, run.headers(), DEADLINE_S + 60)
        front.t_fault_end = time.monotonic()  # the fault's end at the client: recovery is timed from here
        events = [e for e in raw.split(b"\n\n") if e.strip()]
        if status == 200:  # the stream had begun: a terminal error event, then [DONE]
            last = json.loads(events[-2].split(b"data: ", 1)[1]) if len(events) >= 2 else {}
            code = last.get("error", {}).get("code")
        else:
            code = json.loads(raw).get("error", {}).get("code")
        front.clear()
        if front.proxy is not None:
            front.engine_idle()
        posts = front.upstream_posts()
        again = httpx.post(
            run.base_url + "/chat/completions", json=chat_body(run.wire_model, stream=False), headers=run.headers(), timeout=60
        )
        gw.settle_evidence()
        rows = evidence_rows(front.state_dir, run.binding_id, at_least=2)
        # in arrival order: the run's time left only falls. The file's order is not it: the held request's row is
        # written once the engine has shown its slot free, which can be after the next request's refusal
        first, refused = sorted(rows, key=lambda r: -r["deadline_left_ms"])[:2]
        certify_record.detail("deadline_s", DEADLINE_S)
        certify_record.detail("first", {"status": status, "broken": broken, "code": code})
        keep = ("status", "error_code", "timeout_ms", "deadline_left_ms", "abort_outcome")
        certify_record.detail("first_row", {k: first.get(k) for k in keep})
        certify_record.detail("next", {"status": again.status_code, "code": again.json()["error"]["code"]})
        certify_record.detail("next_row", {k: refused.get(k) for k in ("status", "error_code", "engine_rid")})
        assert (status in (200, 504), broken, code) == (True, False, "inference_deadline_exceeded"), raw[-400:]
        assert (first["status"], first["error_code"]) == ("failed", "inference_deadline_exceeded"), first
        assert first["deadline_left_ms"] == DEADLINE_S * 1000  # the first request starts the run's clock
        assert first["timeout_ms"] <= min(DEADLINE_S * 1000, lock.execution.request_timeout_ms), first
        assert first["abort_outcome"] == "free", "the engine was told (its connection closed) and shown its slot free"
        assert (again.status_code, again.json()["error"]["code"]) == (504, "inference_deadline_exceeded")
        assert (refused["status"], refused["error_code"]) == ("rejected", "inference_deadline_exceeded"), refused
        assert front.upstream_posts() == posts == 1, "only the first request reached the engine"
        front.recovered(certify_record)
