"""Streams and faults through a real gateway: bytes exact, failures recorded, slots and permits freed."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp.http_writer import StreamWriter

from fixtures.fake_sglang.parity_checks import chunk_payloads
from fixtures.process_faults import wait_for
from gateway.server import Gateway
from gateway.transport import relay_stream
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, start_engine, target_for, token_of

pytestmark = pytest.mark.integration


def _auth(rec: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_of(rec)}"}


def _chat_body(stream: bool, max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny-wire",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": stream,
        **extra,
    }


def _engine_bytes(engine: Engine, path: str, body: dict[str, Any]) -> bytes:
    """What the engine itself answers to the body the gateway would send (same lock values)."""
    r = httpx.post(engine.base + path, json=body, headers={"Authorization": f"Bearer {engine.key}"}, timeout=30)
    return r.content


def _sse_events(raw: bytes) -> list[bytes]:
    return [e for e in raw.split(b"\n\n") if e.strip()]


def _strip_ids(events: list[bytes]) -> list[Any]:
    out = []
    for e in events:
        data = e.split(b"data: ", 1)[1]
        obj = json.loads(data) if data != b"[DONE]" else data
        if isinstance(obj, dict):
            obj.pop("id", None)
            obj.pop("created", None)
        out.append(obj)
    return out


_LOCK_SAMPLING = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "seed": 0}


def test_split_utf8_reaches_the_client_as_the_engine_sent_it(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    engine.faults("split_utf8")
    with httpx.stream("POST", rec.base_url + "/chat/completions", json=_chat_body(True), headers=_auth(rec), timeout=30) as r:
        assert r.status_code == 200
        raw = b"".join(r.iter_raw())
    text = raw.decode("utf-8")  # whole characters only
    assert "é漢🙂" in text
    assert raw.endswith(b"data: [DONE]\n\n")
    # The engine is deterministic (seeded text, lock sampling): compare with what it sends directly, ids aside.
    direct = _engine_bytes(
        engine,
        "/v1/chat/completions",
        {**_chat_body(True), **_LOCK_SAMPLING},
    )

    assert _strip_ids(_sse_events(raw)) == _strip_ids(_sse_events(direct))
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] in ("completed", "incomplete") and row["ttft_ms"] is not None and row["engine_rid"]


def _raw_chat_request(rec: Any, body: dict[str, Any], version: str) -> bytes:
    """A chat completions request for a raw socket (the HTTP version and the reader are the test's)."""
    data = json.dumps(body).encode()
    head = (
        f"POST {httpx.URL(rec.base_url).path}/chat/completions {version}\r\nHost: x\r\n"
        f"Authorization: Bearer {token_of(rec)}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


_LONG = 2000  # tokens: a ~0.5 MB stream, every upstream read its own chunk


def _small_window_client(rec: Any) -> socket.socket:
    """A client socket with a 4 KiB receive buffer (set before connect: it bounds the advertised window)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    url = httpx.URL(rec.base_url)
    sock.connect((url.host, url.port))
    return sock


def _read_to_the_last_chunk(sock: socket.socket, bufsize: int) -> bytes:
    raw = b""
    while not raw.endswith(b"0\r\n\r\n"):
        data = sock.recv(bufsize)
        assert data, "the gateway closed the stream early"
        raw += data
    return raw


def _assert_the_engines_long_stream(raw: bytes, engine: Engine) -> None:
    """Whole and in order, as the engine sends the same request directly (ids aside)."""
    assert raw.startswith(b"HTTP/1.1 200 ")
    events = _sse_events(b"".join(chunk_payloads(raw)))
    assert len(raw) > 256 * 1024 and events[-1] == b"data: [DONE]"
    direct = _engine_bytes(engine, "/v1/chat/completions", {**_chat_body(True, max_tokens=_LONG), **_LOCK_SAMPLING})
    assert _strip_ids(events) == _strip_ids(_sse_events(direct))


def test_a_client_reading_slowly_gets_every_event(engine: Engine, gateway: GatewayThread) -> None:
    """A long stream (~0.5 MB, every upstream read written as its own chunk) to a client with a 4 KiB receive
    buffer reading 1 KiB at a time arrives whole and in order, as the engine sends it, and the evidence says
    it completed. (Whether the gateway's transport pauses here depends on the kernel's socket buffers, which
    grow to 4 MiB on loopback: this asserts the relay's bytes; the next test forces the pause.)"""
    rec = gateway.register("run-a", target_for(engine, make_lock(max_output=_LONG)))
    with _small_window_client(rec) as sock:
        sock.sendall(_raw_chat_request(rec, _chat_body(True, max_tokens=_LONG), "HTTP/1.1"))
        raw = _read_to_the_last_chunk(sock, 1024)
    _assert_the_engines_long_stream(raw, engine)
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["status"] in ("completed", "incomplete") and row["output_tokens"] is None) or row["status"] != "failed"


def _shrink_the_send_buffer_toward(gw: Gateway, client: tuple[str, int]) -> bool:
    """On the gateway's loop: the accepted connection from ``client`` gets a fixed 4 KiB kernel send buffer (no
    autotuning, which grows to MiBs on loopback), so a client that stops reading fills the kernel within a few
    KiB and the relay's transport buffer past its high-water mark soon after."""
    assert gw._runner is not None
    for handler in gw._runner.server.connections:
        transport = handler.transport
        if transport is not None and tuple(transport.get_extra_info("peername")[:2]) == client:
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            return True
    return False


def _a_relay_waits_for_the_client_to_drain() -> bool:
    """On the gateway's loop: some ``relay_stream`` is suspended right in ``writer.drain()``: the branch taken
    only after a chunk written straight to the transport left it paused (the first chunk goes through
    ``resp.write``, whose own drain would show ``StreamResponse.write`` here instead)."""
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        while coro is not None:
            awaited = getattr(coro, "cr_await", None)
            if getattr(coro, "__qualname__", "") == relay_stream.__qualname__:
                if getattr(awaited, "__qualname__", "") == StreamWriter.drain.__qualname__:
                    return True
                break
            coro = awaited
    return False


def test_a_client_that_stops_reading_pauses_the_relay_then_gets_every_byte(engine: Engine, gateway: GatewayThread) -> None:
    """Backpressure, deterministically: the client's socket has a 4 KiB receive buffer, the gateway's side of it
    a 4 KiB send buffer, and the client reads nothing until the relay is seen parked in the drain of the
    paused-writing branch (a ~0.5 MB stream cannot fit in the kernel's buffers and the transport's 64 KiB).
    Then it reads the rest: the stream arrives whole and in order, as the engine sends it, and completes."""
    rec = gateway.register("run-a", target_for(engine, make_lock(max_output=_LONG)))
    with _small_window_client(rec) as sock:
        me = sock.getsockname()[:2]
        wait_for(lambda: gateway.call(lambda: _shrink_the_send_buffer_toward(gateway.gw, me)), 30, "the gateway to accept")
        sock.sendall(_raw_chat_request(rec, _chat_body(True, max_tokens=_LONG), "HTTP/1.1"))
        wait_for(lambda: gateway.call(_a_relay_waits_for_the_client_to_drain), 60, "the relay to wait for the client")
        raw = _read_to_the_last_chunk(sock, 65536)
    _assert_the_engines_long_stream(raw, engine)
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] in ("completed", "incomplete")


def test_an_http10_client_gets_the_stream_unframed(engine: Engine, gateway: GatewayThread) -> None:
    """HTTP/1.0 has no chunked encoding: the relay writes the engine's bytes as they are and ends the body by
    closing the connection (the relay frames chunks itself only where aiohttp chunks the response)."""
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    url = httpx.URL(rec.base_url)
    with socket.create_connection((url.host, url.port), timeout=60) as sock:
        sock.sendall(_raw_chat_request(rec, _chat_body(True, max_tokens=12), "HTTP/1.0"))
        raw = b""
        while data := sock.recv(65536):
            raw += data
    status, _, payload = raw.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.") and b" 200 " in status.split(b"\r\n")[0]
    assert b"transfer-encoding" not in status.lower()
    events = _sse_events(payload)
    assert b"\r\n" not in payload and all(e.startswith(b"data: ") for e in events), "no chunk framing in the body"
    direct = _engine_bytes(engine, "/v1/chat/completions", {**_chat_body(True, max_tokens=12), **_LOCK_SAMPLING})
    assert events[-1] == b"data: [DONE]" and _strip_ids(events) == _strip_ids(_sse_events(direct))


def test_coalesced_events_pass_and_are_counted(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    engine.faults("coalesce_events:n=4")
    body = {"model": "tiny-wire", "input": "hello", "max_output_tokens": 6, "stream": True}
    with httpx.stream("POST", rec.base_url + "/responses", json=body, headers=_auth(rec), timeout=30) as r:
        raw = b"".join(r.iter_raw())
    events = _sse_events(raw)
    assert events[0].startswith(b"event: response.created") and events[-1].startswith(b"event: response.")
    assert sum(e.startswith(b"event: response.output_text.delta") for e in events) >= 1
    [row] = evidence_rows(gateway, rec.binding_id)
    # the -2 compensation: the engine produced exactly the budget asked for
    assert row["engine_rid"].startswith("resp_") and row["output_tokens"] == 6 and row["max_output_tokens"] == 6
    assert row["status"] == "incomplete"  # cut by the budget, as the engine says
    [seen] = engine.received()
    assert seen["path"] == "/v1/responses"


def test_partial_event_at_close_is_a_failed_request_and_a_broken_client_stream(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    engine.faults("partial_event_close")
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", rec.base_url + "/chat/completions", json=_chat_body(True), headers=_auth(rec), timeout=30) as r,
    ):
        b"".join(r.iter_raw())
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] == "failed" and row["http_status"] == 200
    assert row["error_code"] == "inference_upstream_failed"  # the engine is alive: not a process exit


@pytest.mark.parametrize("route", ["/chat/completions", "/responses"])
def test_200_then_inband_error_is_failed_and_never_retried(engine: Engine, gateway: GatewayThread, route: str) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    engine.faults("inband_error:after=2")
    body = _chat_body(True) if route == "/chat/completions" else {"model": "tiny-wire", "input": "hi", "stream": True}
    with httpx.stream("POST", rec.base_url + route, json=body, headers=_auth(rec), timeout=30) as r:
        assert r.status_code == 200
        raw = b"".join(r.iter_raw())
    assert b"error" in raw or b"response.failed" in raw
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["status"], row["error_code"]) == ("failed", "inference_upstream_failed")
    assert len(engine.posts()) == 1


def test_client_disconnect_frees_the_engine_slot_and_the_permit_once(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    engine.faults("stall_mid_stream:t=60,after=3")
    port = gateway.gw.port
    assert port is not None
    path = rec.base_url.split(str(port), 1)[1] + "/chat/completions"
    body = json.dumps(_chat_body(True, max_tokens=32)).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token_of(rec)}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    got = b""
    while got.count(b"data: ") < 3:
        got += sock.recv(65536)
    assert engine.state()["num_running_reqs"] == 1
    sock.close()
    t_close = time.monotonic()
    deadline = t_close + 5.0
    while engine.state()["num_running_reqs"] != 0:
        assert time.monotonic() < deadline, "the engine slot was not freed"
        time.sleep(0.005)
    freed_ms = (time.monotonic() - t_close) * 1000
    print(f"engine slot freed {freed_ms:.1f} ms after the client closed")
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] == "cancelled"
    [queue] = gateway.gw.queues.values()
    assert (queue.acquired, queue.released, queue.repeat_releases, queue.in_use) == (1, 1, 0, 0)
    assert engine.state()["num_aborted_requests"] >= 1


def test_engine_death_mid_stream_ends_the_stream_with_process_exited(
    tiny_model: Path, tmp_path: Path, own_engines: list[Engine], gateway: GatewayThread
) -> None:
    engine = start_engine(tiny_model, tmp_path / "crash", "--fault", "crash_mid_stream:after=3")
    own_engines.append(engine)
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", rec.base_url + "/chat/completions", json=_chat_body(True), headers=_auth(rec), timeout=30) as r,
    ):
        b"".join(r.iter_raw())
    engine.proc.wait(timeout=10)
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["status"], row["error_code"]) == ("failed", "inference_process_exited")
    r2 = httpx.post(rec.base_url + "/chat/completions", json=_chat_body(False), headers=_auth(rec), timeout=30)
    assert (r2.status_code, r2.json()["error"]["code"]) == (502, "inference_process_exited")


def test_queue_timeout_is_503_with_the_code(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock(max_running=1)), queue_timeout_ms=200)
    engine.faults("stall_mid_stream:t=3,after=2")
    with httpx.stream("POST", rec.base_url + "/chat/completions", json=_chat_body(True), headers=_auth(rec), timeout=30) as r:
        chunks = r.iter_raw()  # keep the iterator: dropping it closes the stream
        first = next(chunks)  # the only permit is now held by this stream
        assert r.status_code == 200, first
        r2 = httpx.post(rec.base_url + "/chat/completions", json=_chat_body(False), headers=_auth(rec), timeout=30)
        assert (r2.status_code, r2.json()["error"]["code"]) == (503, "inference_queue_timeout")
        assert r2.headers["Retry-After"] == "1"
    rows = evidence_rows(gateway, rec.binding_id)
    assert any(row["error_code"] == "inference_queue_timeout" and row["status"] == "rejected" for row in rows)
    assert len(engine.posts()) == 1


def test_fairness_one_run_cannot_starve_another(engine: Engine, gateway: GatewayThread) -> None:
    target = target_for(engine, make_lock(max_running=1, max_queued=64))  # the queue holds what the lock allows
    a = gateway.register("run-a", target)
    b = gateway.register("run-b", target)
    engine.faults("stall_mid_stream:t=2,after=1")  # the first stream holds the only permit for 2 s
    order: list[str] = []

    def send(rec: Any, tag: str) -> None:
        r = httpx.post(rec.base_url + "/chat/completions", json=_chat_body(True, max_tokens=2), headers=_auth(rec), timeout=120)
        assert r.status_code == 200, r.text
        order.append(tag)

    with concurrent.futures.ThreadPoolExecutor(max_workers=60) as pool:
        futures = [pool.submit(send, a, f"a{i}") for i in range(50)]
        deadline = time.monotonic() + 30
        while gateway.call(lambda: sum(q.waiting for q in gateway.gw.queues.values())) < 40:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        engine.faults()
        futures.append(pool.submit(send, b, "b"))
        for f in futures:
            f.result()
    position = order.index("b")
    print(f"run b served at position {position} of {len(order)}")
    assert position < 25


def test_context_exceeded_never_reaches_the_engine(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock(context=512, max_output=128)))
    checker = gateway.call(lambda: gateway.gw.registry.get(rec.binding_id)).checker  # type: ignore[union-attr]
    renders, skipped = checker.renders, checker.skipped
    long_text = "word " * 600
    body = {"model": "tiny-wire", "messages": [{"role": "user", "content": long_text}], "max_tokens": 8}
    r = httpx.post(rec.base_url + "/chat/completions", json=body, headers=_auth(rec), timeout=30)
    err = r.json()["error"]  # OpenAI's code, which its clients recognise; the table's code in details
    assert (r.status_code, err["code"], err["type"]) == (400, "context_length_exceeded", "invalid_request_error")
    assert err["details"]["code"] == "inference_context_exceeded" and err["details"]["context_tokens"] == 512
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["status"], row["error_code"]) == ("rejected", "inference_context_exceeded")
    assert checker.renders == renders + 1  # the bound did not fit: rendered and counted exactly
    ok = httpx.post(rec.base_url + "/chat/completions", json=_chat_body(False), headers=_auth(rec), timeout=30)
    assert ok.status_code == 200
    assert (checker.renders, checker.skipped) == (renders + 1, skipped + 1)  # proven to fit, never rendered
    assert len(engine.posts()) == 1


def test_engine_receives_lock_values_and_compensated_budget(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    r = httpx.post(
        rec.base_url + "/responses",
        json={"model": "tiny-wire", "input": "hi", "max_output_tokens": 5},
        headers=_auth(rec),
        timeout=30,
    )
    assert r.status_code == 200
    body = r.json()
    assert body["usage"]["output_tokens"] == 5
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["output_tokens"], row["max_output_tokens"], row["input_tokens"]) == (5, 5, body["usage"]["input_tokens"])
    assert row["engine_rid"] == body["id"] and row["queue_ms"] is not None and row["e2e_ms"] >= row["queue_ms"]


def test_settled_evidence_includes_an_exchange_still_being_recorded(engine: Engine, gateway: GatewayThread) -> None:
    """A client can read a stream's last byte before the handler records it; readers of evidence wait for it."""
    rec = gateway.register("run-settle", target_for(engine, make_lock()))
    with httpx.stream("POST", rec.base_url + "/chat/completions", json=_chat_body(True), headers=_auth(rec), timeout=30) as r:
        assert r.status_code == 200 and b"".join(r.iter_raw()).endswith(b"data: [DONE]\n\n")
    gw = gateway.gw
    recorded: list[bool] = []

    def finish_late() -> None:  # stands in for a handler that records after its client is done
        gw.unrecorded -= 1
        recorded.append(True)

    def begin() -> None:
        gw.unrecorded += 1
        asyncio.get_running_loop().call_later(0.3, finish_late)

    gateway.call(begin)
    rows = evidence_rows(gateway, rec.binding_id)
    assert recorded == [True]
    assert len(rows) == 1 and rows[0]["status"] in ("completed", "incomplete") and gateway.call(lambda: gw.unrecorded) == 0


def test_benchmark_controls_pass_on_a_benchmark_lock_and_each_use_is_recorded(engine: Engine, gateway: GatewayThread) -> None:
    plain = gateway.register("run-plain", target_for(engine, make_lock()))
    bench = gateway.register("run-bench", target_for(engine, make_lock(benchmark=True)))
    url = "/chat/completions"
    default = httpx.post(plain.base_url + url, json=_chat_body(False, ignore_eos=False), headers=_auth(plain), timeout=30)
    assert default.status_code == 200  # SGLang's default asks for nothing: passes on any lock
    refused = httpx.post(plain.base_url + url, json=_chat_body(False, ignore_eos=True), headers=_auth(plain), timeout=30)
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "inference_parameter_conflict")
    used = httpx.post(
        bench.base_url + url, json=_chat_body(True, ignore_eos=True, min_tokens=4), headers=_auth(bench), timeout=30
    )
    assert used.status_code == 200 and used.content.endswith(b"data: [DONE]\n\n")
    plain_rows = evidence_rows(gateway, plain.binding_id)
    assert [(r["http_status"], r["benchmark_controls"]) for r in plain_rows] == [(200, None), (400, None)]
    [row] = evidence_rows(gateway, bench.binding_id)
    assert (row["http_status"], row["benchmark_controls"]) == (200, {"ignore_eos": True, "min_tokens": 4})


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_evidence_splits_the_time_between_engine_and_gateway(engine: Engine, gateway: GatewayThread, stream: bool) -> None:
    """``engine_ms`` is the engine's share of ``e2e_ms`` (request out -> answer read to its end): an engine that
    waits 300 ms before answering shows it there, and what is left of ``e2e_ms`` is the gateway's."""
    rec = gateway.register("run-split", target_for(engine, make_lock()))
    engine.faults("slow_headers:t=0.3")
    r = httpx.post(rec.base_url + "/chat/completions", json=_chat_body(stream), headers=_auth(rec), timeout=30)
    assert r.status_code == 200
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] in ("completed", "incomplete")
    assert row["e2e_ms"] >= row["engine_ms"] >= 300.0
    if stream:
        assert row["engine_ms"] >= row["engine_ttft_ms"] >= 300.0 and row["ttft_ms"] >= row["engine_ttft_ms"]
    else:
        assert row["engine_ttft_ms"] is None  # a unary answer has no first delta


def test_evidence_has_no_engine_time_for_a_request_the_engine_never_saw(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-refused", target_for(engine, make_lock()))
    r = httpx.post(rec.base_url + "/chat/completions", json=_chat_body(False, max_tokens=10**6), headers=_auth(rec), timeout=30)
    assert r.status_code == 400
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] == "rejected" and row["engine_ms"] is None and row["engine_ttft_ms"] is None
