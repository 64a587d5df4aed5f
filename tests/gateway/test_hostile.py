"""The gateway under hostile input and its OpenAI-shaped refusals.

A real gateway on loopback in front of the fake engine: oversized bodies are refused before they are read,
nesting bombs and malformed fields get 400 naming the field and never reach the engine, an internal error
is a 500 in our shape with a request id, the ``Server`` header names no version, a request past the gateway's
queue bound is 429 with ``Retry-After``, and the official openai SDK raises the
matching exception class for each refusal.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway import server as gateway_server
from gateway.server import GatewayConfig
from tests.gateway.support import Engine, GatewayThread, make_lock, target_for, token_of

pytestmark = pytest.mark.integration

CONTEXT = 4096
LIMIT = CONTEXT * 32 + (1 << 20)  # gateway.intake.body_limit for this lock


def _auth(rec: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_of(rec)}"}


def _chat(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny-wire", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, **extra}


def _resp(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny-wire", "input": "hello", "max_output_tokens": 4, **extra}


def _tool(**fn: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, **fn}}


def _nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def _assert_openai_error(r: httpx.Response, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["param"] == param, err
    assert err["type"] == ("requests" if status == 429 else "server_error" if status >= 500 else "invalid_request_error")
    assert r.headers["Server"] == "hitch-gateway"
    return dict(err)


@pytest.fixture
def run(engine: Engine, gateway: GatewayThread) -> Any:
    return gateway.register("run-h", target_for(engine, make_lock(context=CONTEXT)))


# ---------------------------------------------------------------- body limit


def _raw_exchange(port: int, head: bytes, body_part: bytes) -> bytes:
    """Send a request head and only part of its declared body (the rest never comes), then read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head + body_part)
        reply = b""
        while b"\r\n\r\n" not in reply:
            data = s.recv(65536)
            assert data, reply
            reply += data
        head_part, _, body = reply.partition(b"\r\n\r\n")
        length = int(
            next(v for k, _, v in (h.partition(b": ") for h in head_part.split(b"\r\n")) if k.lower() == b"content-length")
        )
        while len(body) < length:
            data = s.recv(65536)
            assert data, reply
            body += data
    return head_part + b"\r\n\r\n" + body


def test_a_10mb_declared_body_is_refused_413_before_it_is_read(engine: Engine, gateway: GatewayThread, run: Any) -> None:
    path = run.base_url.split(str(gateway.gw.port), 1)[1] + "/chat/completions"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token_of(run)}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {10 << 20}\r\n\r\n"
    ).encode()
    assert gateway.gw.port is not None
    reply = _raw_exchange(gateway.gw.port, head, b'{"model": "tiny-wire", "messages": [')
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413"), reply[:300]
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "inference_request_too_large" and body["error"]["type"] == "invalid_request_error"
    assert engine.received() == []


def test_a_chunked_body_over_the_limit_is_refused_413(engine: Engine, run: Any) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "tiny-wire", "messages": [{"role": "user", "content": "'
        for _ in range(LIMIT // 65536 + 2):
            yield b"a" * 65536
        yield b'"}]}'

    r = httpx.post(run.base_url + "/chat/completions", content=chunks(), headers=_auth(run), timeout=60)
    _assert_openai_error(r, 413, "inference_request_too_large")
    assert engine.received() == []
    ok = httpx.post(run.base_url + "/chat/completions", json=_chat(), headers=_auth(run), timeout=60)
    assert ok.status_code == 200, ok.text


def test_the_body_limit_is_a_gateway_setting(engine: Engine, tmp_path: Any) -> None:
    with GatewayThread(gateway_server.GatewayConfig(state_dir=tmp_path / "gw", max_body_bytes=300)) as gt:
        rec = gt.register("run-small", target_for(engine, make_lock(context=CONTEXT)))
        r = httpx.post(rec.base_url + "/chat/completions", json=_chat(user="x" * 400), headers=_auth(rec), timeout=30)
        _assert_openai_error(r, 413, "inference_request_too_large")
        ok = httpx.post(rec.base_url + "/chat/completions", json=_chat(), headers=_auth(rec), timeout=30)
        assert ok.status_code == 200, ok.text


# ---------------------------------------------------------------- parsing and field shapes


@pytest.mark.parametrize("depth", [100, 1000, 100_000])
def test_a_nesting_bomb_is_a_400(engine: Engine, run: Any, depth: int) -> None:
    bomb = b"[" * depth + b"]" * depth
    r = httpx.post(run.base_url + "/chat/completions", content=bomb, headers=_auth(run), timeout=30)
    _assert_openai_error(r, 400, "inference_protocol_unsupported")
    inside = json.dumps(_chat(metadata={"k": "v"})).replace('"v"', "[" * depth + "]" * depth).encode()
    r = httpx.post(run.base_url + "/chat/completions", content=inside, headers=_auth(run), timeout=30)
    assert r.status_code == 400, r.text
    assert engine.received() == []


MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("chat", _chat(stream_options="yes"), "stream_options"),
    ("chat", _chat(stream=True, stream_options={"include_usage": "true"}), "stream_options.include_usage"),
    ("chat", _chat(response_format="x" * 5000), "response_format"),
    ("chat", _chat(response_format={"type": "xml"}), "response_format.type"),
    ("chat", _chat(response_format={"type": "json_schema"}), "response_format.json_schema"),
    ("chat", _chat(response_format={"type": "json_schema", "json_schema": {"name": 3}}), "response_format.json_schema.name"),
    (
        "chat",
        _chat(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": _nested(100)}}),
        "response_format.json_schema.schema",
    ),
    ("chat", _chat(stop=5), "stop"),
    ("chat", _chat(stop=["a", 1]), "stop"),
    ("chat", _chat(tools=[_tool()], tool_choice=7), "tool_choice"),
    ("chat", _chat(tools=[_tool()], tool_choice={"type": "function"}), "tool_choice"),
    ("chat", _chat(tools=[_tool()], tool_choice={"type": "function", "function": {"name": "g"}}), "tool_choice"),
    ("chat", _chat(tool_choice="required"), "tool_choice"),
    ("chat", _chat(tools=[{"type": "function", "function": "f"}]), "tools[0].function"),
    ("chat", _chat(tools=[{"type": "function", "function": {"name": ["f"]}}]), "tools[0].function.name"),
    ("chat", _chat(tools=[_tool(parameters="object")]), "tools[0].function.parameters"),
    ("chat", _chat(tools=[{"type": ["function"]}]), "tools[0].type"),
    ("chat", _chat(parallel_tool_calls="no", tools=[_tool()]), "parallel_tool_calls"),
    ("chat", _chat(logprobs="yes"), "logprobs"),
    ("chat", _chat(top_logprobs=99), "top_logprobs"),
    ("chat", _chat(reasoning_effort=True), "reasoning_effort"),
    ("chat", _chat(reasoning_effort=["low"]), "reasoning_effort"),
    ("chat", _chat(user=5), "user"),
    ("chat", _chat(metadata="m"), "metadata"),
    ("chat", _chat(logit_bias={"1": 5}), "logit_bias"),
    ("chat", _chat(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role"),
    ("chat", _chat(messages=[{"role": ["user"], "content": "x"}]), "messages[0].role"),
    ("chat", _chat(messages=[{"role": "user"}]), "messages[0].content"),
    ("chat", _chat(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    ("chat", _chat(messages=[{"role": "user", "content": [{"type": ["text"], "text": "x"}]}]), "messages[0].content[0].type"),
    ("chat", _chat(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]), "messages[0].content[0].text"),
    (
        "chat",
        _chat(messages=[{"role": "assistant", "tool_calls": "x"}, {"role": "user", "content": "x"}]),
        "messages[0].tool_calls",
    ),
    (
        "chat",
        _chat(
            messages=[
                {"role": "assistant", "tool_calls": [{"type": "function", "function": 3}]},
                {"role": "user", "content": "x"},
            ]
        ),
        "messages[0].tool_calls[0].function",
    ),
    ("chat", _chat(messages=[{"role": "tool", "content": "x", "tool_call_id": 5}]), "messages[0].tool_call_id"),
    ("chat", _chat(messages="hello"), "messages"),
    ("chat", _chat(max_tokens="4"), "max_tokens"),
    ("chat", _chat(temperature="hot"), "temperature"),
    ("responses", _resp(include="x" * 5000), "include"),
    ("responses", _resp(include=["reasoning.encrypted_content", "bogus"]), "include"),
    ("responses", _resp(text="plain"), "text"),
    ("responses", _resp(text={"format": {"type": "yaml"}}), "text.format.type"),
    ("responses", _resp(text={"format": {"type": "json_schema", "name": "s"}}), "text.format.schema"),
    ("responses", _resp(text={"verbosity": ["low"]}), "text.verbosity"),
    ("responses", _resp(reasoning="high"), "reasoning"),
    ("responses", _resp(reasoning={"effort": {"x": 1}}), "reasoning.effort"),
    ("responses", _resp(reasoning={"summary": "long"}), "reasoning.summary"),
    ("responses", _resp(tool_choice=[]), "tool_choice"),
    ("responses", _resp(tools=[{"type": "function", "name": ""}]), "tools[0].name"),
    ("responses", _resp(tools=[{"type": "function", "name": "f", "parameters": []}]), "tools[0].parameters"),
    ("responses", _resp(tools=[{"type": "function", "name": "f", "strict": "yes"}]), "tools[0].strict"),
    ("responses", _resp(stream_options=[1]), "stream_options"),
    ("responses", _resp(metadata=[1]), "metadata"),
    ("responses", _resp(max_tool_calls=-1), "max_tool_calls"),
    ("responses", _resp(prompt_cache_key=5), "prompt_cache_key"),
    ("responses", _resp(input=[{"role": "wizard", "content": "x"}]), "input[0].role"),
    ("responses", _resp(input=[{"type": 5}]), "input[0].type"),
    ("responses", _resp(input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": 5}]), "input[0].arguments"),
    ("responses", _resp(input=[{"type": "function_call_output", "call_id": 5, "output": "x"}]), "input[0].call_id"),
    ("responses", _resp(input=[{"type": "reasoning", "summary": "x"}, {"role": "user", "content": "x"}]), "input[0].summary"),
    ("responses", _resp(input=[{"type": "input_image"}]), "input[0].type"),
    ("responses", _resp(input=[{"role": "user", "content": [{"type": "input_text", "text": None}]}]), "input[0].content[0].text"),
]


@pytest.mark.parametrize(("route", "body", "param"), MALFORMED, ids=[f"{r}-{p}-{i}" for i, (r, _, p) in enumerate(MALFORMED)])
def test_a_malformed_field_is_a_400_naming_it_and_never_reaches_the_engine(
    engine: Engine, run: Any, route: str, body: dict[str, Any], param: str
) -> None:
    path = "/chat/completions" if route == "chat" else "/responses"
    r = httpx.post(run.base_url + path, json=body, headers=_auth(run), timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["code"] in ("inference_parameter_conflict", "inference_modality_unsupported")
    assert engine.received() == []


def test_well_formed_optional_fields_pass(engine: Engine, run: Any) -> None:
    chat = _chat(
        stream=True, stream_options={"include_usage": True}, stop=["\n\n"], user="u", metadata={"k": "v"},
        response_format={"type": "text"}, logprobs=False, tools=[_tool(description="d", strict=False)],
        tool_choice={"type": "function", "function": {"name": "f"}}, parallel_tool_calls=True, reasoning_effort="low",
    )  # fmt: skip
    r = httpx.post(run.base_url + "/chat/completions", json=chat, headers=_auth(run), timeout=60)
    assert r.status_code == 200, r.text
    resp = _resp(
        include=["reasoning.encrypted_content"], text={"verbosity": "medium", "format": {"type": "text"}},
        reasoning={"effort": "low", "summary": "auto"}, tools=[{"type": "function", "name": "f", "parameters": {}}],
        tool_choice="auto", prompt_cache_key="k", metadata={"a": "b"}, stop="\n",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
        ],
    )  # fmt: skip
    r = httpx.post(run.base_url + "/responses", json=resp, headers=_auth(run), timeout=60)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("depth", [200, 900, 980])
def test_a_deep_tool_schema_is_never_a_5xx(engine: Engine, run: Any, depth: int) -> None:
    body = json.dumps(_chat(tools=[_tool(parameters={"type": "object"})])).replace(
        '{"type": "object"}', '{"a":' * depth + "1" + "}" * depth
    )
    r = httpx.post(run.base_url + "/chat/completions", content=body.encode(), headers=_auth(run), timeout=60)
    assert r.status_code == (400 if depth > 512 else 200), r.text[:300]  # gateway.request_shape.BODY_MAX_DEPTH


# ---------------------------------------------------------------- last resort, Server header


def test_an_internal_error_is_a_500_in_our_shape_logged_once(
    engine: Engine, run: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise ZeroDivisionError("forced for the test")

    monkeypatch.setattr(gateway_server, "apply_policy", broken)
    with caplog.at_level(logging.ERROR, logger="gateway.server"):
        r = httpx.post(run.base_url + "/chat/completions", json=_chat(), headers=_auth(run), timeout=30)
    err = _assert_openai_error(r, 500, "internal_error")
    rid = r.headers["x-hitch-request-id"]
    assert len(rid) == 24 and "ZeroDivisionError" not in err["message"]
    logged = [rec for rec in caplog.records if rec.exc_info and rid in rec.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None and logged[0].exc_info[0] is ZeroDivisionError
    monkeypatch.undo()
    ok = httpx.post(run.base_url + "/chat/completions", json=_chat(), headers=_auth(run), timeout=30)
    assert ok.status_code == 200, ok.text


def test_the_server_header_names_no_version(engine: Engine, gateway: GatewayThread, run: Any) -> None:
    seen = [
        httpx.post(run.base_url + "/chat/completions", json=_chat(), headers=_auth(run), timeout=30),
        httpx.post(run.base_url + "/chat/completions", json=_chat(stream=True), headers=_auth(run), timeout=30),
        httpx.get(run.base_url + "/models", headers=_auth(run), timeout=30),
        httpx.post(run.base_url + "/chat/completions", json=_chat(n=2), headers=_auth(run), timeout=30),
        httpx.get(run.base_url + "/nope", headers=_auth(run), timeout=30),
        httpx.get(run.base_url + "/models", timeout=30),
    ]
    assert [r.status_code for r in seen] == [200, 200, 200, 400, 404, 401]
    assert {r.headers.get("Server") for r in seen} == {"hitch-gateway"}
    with socket.create_connection(("127.0.0.1", gateway.gw.port), timeout=10) as s:  # malformed HTTP: aiohttp's answer
        s.sendall(b"GARBAGE\x00 / HTTP/9\r\n\r\n")
        reply = s.recv(65536)
    assert reply.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request") and b"\r\nServer: hitch-gateway\r\n" in reply, reply[:300]


# ---------------------------------------------------------------- admission


def _wait_for(cond: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.01)


def _counts(gt: GatewayThread) -> tuple[int, int]:
    """(waiting, in use) over the gateway's queues."""
    return gt.call(lambda: (sum(q.waiting for q in gt.gw.queues.values()), sum(q.in_use for q in gt.gw.queues.values())))


def test_beyond_the_gateways_bound_a_request_is_429_at_once(engine: Engine, tmp_path: Any) -> None:
    """The bound is the gateway's (here 2 waiting), not the lock's max_queued_requests (1, the engine's queue):
    the third concurrent request waits instead of failing, and only the one past the bound is refused."""
    lock = make_lock(max_running=1, max_queued=1)
    with GatewayThread(GatewayConfig(state_dir=tmp_path / "gw", max_waiting=2)) as gt:
        rec = gt.register("run-q", target_for(engine, lock))
        engine.faults("stall_mid_stream:t=3,after=1")  # the first stream holds the only permit

        def send() -> int:
            r = httpx.post(rec.base_url + "/chat/completions", json=_chat(stream=True), headers=_auth(rec), timeout=60)
            return r.status_code

        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            first = pool.submit(send)
            _wait_for(lambda: _counts(gt)[1] == 1, "the first request holds the permit")
            queued = []
            for n in (1, 2):  # beyond the lock's queue of 1: still waiting, never refused
                queued.append(pool.submit(send))
                _wait_for(lambda n=n: _counts(gt)[0] == n, f"{n} request(s) wait")  # type: ignore[misc]
            r = httpx.post(rec.base_url + "/chat/completions", json=_chat(stream=True), headers=_auth(rec), timeout=60)
            err = _assert_openai_error(r, 429, "inference_queue_full")
            assert r.headers["Retry-After"] == "1" and "2 waiting" in err["message"]
            assert [f.result(60) for f in (first, *queued)] == [200, 200, 200]
        assert len(engine.posts()) == 3  # the refused one never reached the engine


# ---------------------------------------------------------------- the openai SDK


def test_the_openai_sdk_raises_the_matching_class_for_each_refusal(
    engine: Engine, gateway: GatewayThread, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    lock = make_lock(context=CONTEXT, max_running=1, max_queued=1)
    rec = gateway.register("run-sdk", target_for(engine, lock))
    with openai.OpenAI(base_url=rec.base_url, api_key=token_of(rec), max_retries=0, timeout=60) as client:
        msgs: Any = [{"role": "user", "content": "hello"}]

        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(model="tiny-wire", messages=msgs, stream_options="yes")  # type: ignore[call-overload]
        assert (bad.value.code, bad.value.param, bad.value.type) == (
            "inference_parameter_conflict",
            "stream_options",
            "invalid_request_error",
        )
        with pytest.raises(openai.BadRequestError) as ctx:
            client.chat.completions.create(model="tiny-wire", messages=[{"role": "user", "content": "word " * 20000}])
        assert ctx.value.code == "context_length_exceeded"  # what the openai SDK and Codex recognise
        assert isinstance(ctx.value.body, dict) and ctx.value.body["details"]["code"] == "inference_context_exceeded"
        with (
            pytest.raises(openai.AuthenticationError) as auth,
            openai.OpenAI(base_url=rec.base_url, api_key="wrong", max_retries=0) as other,
        ):
            other.models.list()
        assert auth.value.code == "inference_token_invalid"
        with pytest.raises(openai.NotFoundError) as missing:
            client.get("/nope", cast_to=object)
        assert missing.value.code == "inference_route_unavailable"
        with pytest.raises(openai.APIStatusError) as large:
            client.chat.completions.create(model="tiny-wire", messages=msgs, user="x" * (LIMIT + 1))
        assert (large.value.status_code, large.value.code) == (413, "inference_request_too_large")

        def broken(*_: Any, **__: Any) -> Any:
            raise ZeroDivisionError("forced for the test")

        monkeypatch.setattr(gateway_server, "apply_policy", broken)
        with pytest.raises(openai.InternalServerError) as internal:
            client.chat.completions.create(model="tiny-wire", messages=msgs)
        assert (internal.value.code, internal.value.type) == ("internal_error", "server_error")
        monkeypatch.undo()

        # fill a gateway's queue (its bound here: 1 waiting): one running (stalled), one waiting
        engine.faults("stall_mid_stream:t=3,after=1")
        with (
            GatewayThread(GatewayConfig(state_dir=tmp_path / "small", max_waiting=1)) as small,
            concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool,
        ):
            other = small.register("run-sdk-small", target_for(engine, lock))
            limited_client = openai.OpenAI(base_url=other.base_url, api_key=token_of(other), max_retries=0, timeout=60)

            def stream() -> list[Any]:
                return list(limited_client.chat.completions.create(model="tiny-wire", messages=msgs, stream=True))

            held = [pool.submit(stream)]
            _wait_for(lambda: _counts(small)[1] == 1, "a running request")
            held.append(pool.submit(stream))
            _wait_for(lambda: _counts(small)[0] == 1, "a waiting request")
            with pytest.raises(openai.RateLimitError) as limited:
                limited_client.chat.completions.create(model="tiny-wire", messages=msgs)
            assert limited.value.code == "inference_queue_full" and limited.value.response.headers["Retry-After"] == "1"
            for f in held:
                f.result(60)
            limited_client.close()

        gateway.call(lambda: gateway.gw.revoke(rec.binding_id))
        with pytest.raises(openai.PermissionDeniedError) as revoked:
            client.chat.completions.create(model="tiny-wire", messages=msgs)
        assert revoked.value.code == "inference_binding_revoked"
