"""The HTTP layer a hostile neighbour meets, over raw sockets against a real gateway on the fake engine.

A head that never finishes and a body that stalls each get 408 ``inference_request_timeout`` and a closed
connection (the gateway's short test settings; the outcome is asserted, never the time it took); pipelined
requests are answered in order; a duplicated singleton header is 400 ``inference_header_duplicated``
whichever copy comes first; past the connection cap a new connection is refused with 503
``inference_connection_limit`` while the connections already open keep being served.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.server import GatewayConfig
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, target_for, token_of

pytestmark = pytest.mark.integration

BOUND_S = 60  # every socket read is bounded by this; no assertion depends on how long anything took


@pytest.fixture
def gateway_config(tmp_path: Path) -> GatewayConfig:
    return GatewayConfig(state_dir=tmp_path / "gw", header_timeout_s=0.5, body_timeout_s=0.5)


@pytest.fixture
def run(engine: Engine, gateway: GatewayThread) -> Any:
    return gateway.register("run-limits", target_for(engine, make_lock(context=4096)))


def _chat_body(**extra: Any) -> bytes:
    body = {"model": "tiny-wire", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, **extra}
    return json.dumps(body).encode()


def _path(run: Any, route: str) -> str:
    return "/" + str(run.base_url).split("/", 3)[3] + route


def _post(run: Any, route: str, body: bytes, *extra_headers: str) -> bytes:
    head = [f"POST {_path(run, route)} HTTP/1.1", "Host: gw", "Content-Type: application/json"]
    head += [f"Content-Length: {len(body)}", *extra_headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class _Reader:
    """HTTP/1.1 replies read off one socket, in order (Content-Length or chunked bodies)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def _take_until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            assert self._fill(), f"the connection closed mid-reply: {self.buf[:300]!r}"
        part, _, self.buf = self.buf.partition(sep)
        return part

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            assert self._fill(), f"the connection closed mid-body: {self.buf[:300]!r}"
        part, self.buf = self.buf[:n], self.buf[n:]
        return part

    def reply(self) -> tuple[int, dict[str, str], bytes]:
        head = self._take_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._take_until(b"\r\n").split(b";")[0], 16)
                if size == 0:
                    self._take_until(b"\r\n")
                    return status, headers, body
                body += self._take(size)
                self._take(2)
        return status, headers, self._take(int(headers.get("content-length", "0")))

    def closed(self) -> bool:
        """True once the peer has closed (the next read is EOF or a reset after the answer)."""
        try:
            return not self.buf and not self._fill()
        except ConnectionResetError:
            return True


def _connect(gt: GatewayThread) -> socket.socket:
    assert gt.gw.port is not None
    return socket.create_connection(("127.0.0.1", gt.gw.port), timeout=BOUND_S)


def _error_code(body: bytes) -> str:
    code: str = json.loads(body)["error"]["code"]
    return code


def _wait_for(cond: Any, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not cond():
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.01)


# ---------------------------------------------------------------- read timeouts


@pytest.mark.parametrize(
    "sent", [b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-"], ids=["nothing", "half a head"]
)
def test_a_stalled_head_gets_408_and_a_closed_connection(engine: Engine, gateway: GatewayThread, sent: bytes) -> None:
    with _connect(gateway) as s:
        s.sendall(sent)
        reader = _Reader(s)
        status, headers, body = reader.reply()
        assert status == 408 and _error_code(body) == "inference_request_timeout", body
        assert headers["connection"].lower() == "close" and headers["server"] == "hitch-gateway"
        assert reader.closed()
    assert engine.received() == []


def test_a_stalled_head_after_a_kept_alive_request_gets_408(engine: Engine, gateway: GatewayThread, run: Any) -> None:
    with _connect(gateway) as s:
        reader = _Reader(s)
        s.sendall(_post(run, "/chat/completions", _chat_body(), f"Authorization: Bearer {token_of(run)}"))
        assert reader.reply()[0] == 200
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")  # the next head never finishes
        status, _, body = reader.reply()
        assert status == 408 and _error_code(body) == "inference_request_timeout", body
        assert reader.closed()


def test_a_stalled_body_gets_408_a_closed_connection_and_an_evidence_row(
    engine: Engine, gateway: GatewayThread, run: Any
) -> None:
    body = _chat_body()
    with _connect(gateway) as s:
        s.sendall(_post(run, "/chat/completions", body, f"Authorization: Bearer {token_of(run)}")[: -len(body) // 2])
        reader = _Reader(s)
        status, headers, reply = reader.reply()
        assert status == 408 and _error_code(reply) == "inference_request_timeout", reply
        assert headers["connection"].lower() == "close"
        assert reader.closed()
    assert engine.received() == []
    rows = evidence_rows(gateway, run.binding_id)
    assert [(r["status"], r["http_status"], r["error_code"]) for r in rows] == [("rejected", 408, "inference_request_timeout")]
    ok = httpx.post(run.base_url + "/chat/completions", content=body, headers={"Authorization": f"Bearer {token_of(run)}"})
    assert ok.status_code == 200, ok.text


# ---------------------------------------------------------------- pipelining


def test_two_pipelined_posts_get_two_answers_in_order(engine: Engine, gateway: GatewayThread, run: Any) -> None:
    auth = f"Authorization: Bearer {token_of(run)}"
    responses = json.dumps({"model": "tiny-wire", "input": "hello", "max_output_tokens": 4}).encode()
    with _connect(gateway) as s:
        s.sendall(_post(run, "/chat/completions", _chat_body(), auth) + _post(run, "/responses", responses, auth))
        reader = _Reader(s)
        first, second = reader.reply(), reader.reply()
    assert first[0] == 200 and json.loads(first[2])["object"] == "chat.completion", first
    assert second[0] == 200 and json.loads(second[2])["object"] == "response", second
    assert [r["route"] for r in evidence_rows(gateway, run.binding_id)] == ["/v1/chat/completions", "/v1/responses"]


# ---------------------------------------------------------------- singleton headers


@pytest.mark.parametrize("valid_first", [True, False], ids=["valid first", "valid second"])
def test_two_authorization_headers_are_400_whichever_comes_first(
    engine: Engine, gateway: GatewayThread, run: Any, valid_first: bool
) -> None:
    pair = [f"Authorization: Bearer {token_of(run)}", "Authorization: Bearer hitch-not-the-token"]
    with _connect(gateway) as s:
        s.sendall(_post(run, "/chat/completions", _chat_body(), *(pair if valid_first else pair[::-1])))
        status, headers, body = _Reader(s).reply()
    assert status == 400 and _error_code(body) == "inference_header_duplicated", body
    assert headers["server"] == "hitch-gateway"
    assert engine.received() == []
    assert evidence_rows(gateway, run.binding_id) == []


@pytest.mark.parametrize(
    "repeated", ["Host: other", "Content-Type: application/json", "content-length: {n}"], ids=["host", "type", "length"]
)
def test_other_duplicated_singleton_headers_are_400(engine: Engine, gateway: GatewayThread, run: Any, repeated: str) -> None:
    body = _chat_body()
    with _connect(gateway) as s:
        s.sendall(_post(run, "/chat/completions", body, f"Authorization: Bearer {token_of(run)}", repeated.format(n=len(body))))
        reader = _Reader(s)
        status, headers, reply = reader.reply()
        assert status == 400 and _error_code(reply) == "inference_header_duplicated", reply
        assert headers["server"] == "hitch-gateway"
        assert reader.closed()  # the request's framing is in doubt: nothing more is read on this connection
    assert engine.received() == []


# ---------------------------------------------------------------- connection cap


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[GatewayThread]:
    with GatewayThread(GatewayConfig(state_dir=tmp_path / "capped", max_connections=2)) as gt:
        yield gt


def test_past_the_connection_cap_a_connection_is_refused_cleanly(engine: Engine, capped: GatewayThread) -> None:
    rec = capped.register("run-cap", target_for(engine, make_lock(context=4096)))
    auth = f"Authorization: Bearer {token_of(rec)}"
    held = [_connect(capped), _connect(capped)]
    try:
        _wait_for(lambda: capped.call(lambda: capped.gw.open_connections) == 2, "two open connections")
        with _connect(capped) as extra:
            extra.sendall(_post(rec, "/chat/completions", _chat_body(), auth))
            reader = _Reader(extra)
            status, headers, body = reader.reply()
            assert status == 503 and _error_code(body) == "inference_connection_limit", body
            assert headers["retry-after"] == "1" and headers["connection"].lower() == "close"
            assert reader.closed()
        # the connections already open are still served, two pipelined requests in order
        second = _Reader(held[1])
        held[1].sendall(_post(rec, "/chat/completions", _chat_body(), auth) + _post(rec, "/chat/completions", b"{", auth))
        assert [second.reply()[0], second.reply()[0]] == [200, 400]
        held.pop(0).close()
        _wait_for(lambda: capped.call(lambda: capped.gw.open_connections) < 2, "a free connection")
        ok = httpx.post(rec.base_url + "/chat/completions", content=_chat_body(), headers={"Authorization": auth[15:]})
        assert ok.status_code == 200, ok.text
    finally:
        for s in held:
            s.close()
    assert capped.gw.metrics.refusals["inference_connection_limit"] == 1
