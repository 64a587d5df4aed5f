"""A client that closes around a stream's terminal event: evidence says what was relayed, never guesses.

A scripted engine (a real aiohttp server on loopback) sends a stream in pieces and holds it at a chosen
point until the test lets it go, so the client's close lands exactly there, with no timing involved. Like SGLang
it ends a request whose connection closed (the gateway's abort) and reports its load on ``/v1/loads``, which the
gateway reads before it hands the aborted request's permit on:

- before the terminal event (``[DONE]`` / ``response.completed``) was relayed whole → ``cancelled``;
- after it was relayed, while the engine's body is still open → the status the stream stated
  (``incomplete`` for a length finish, ``completed`` for a stop), not ``cancelled`` (the openai SDK closes
  right after ``[DONE]``: CI saw such streams recorded as cancelled);
- after the whole body → the stream's status.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.bindings import UpstreamTarget
from tests.gateway.support import GatewayThread, evidence_rows, make_lock, token_of

pytestmark = pytest.mark.integration


def _sse(obj: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n").encode()


HEAD = {"id": "rid-1", "object": "chat.completion.chunk", "created": 1, "model": "tiny-wire"}


def _chat_pieces(finish: str) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _sse({**HEAD, "choices": [choice], **extra})

    usage = {"prompt_tokens": 5, "total_tokens": 8, "completion_tokens": 3, "prompt_tokens_details": None}
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hi there"}),
        chunk({}, finish),
        _sse({**HEAD, "choices": [], "usage": usage}),
        b"data: [DO",
        b"NE]\n\n",
    ]


def _responses_pieces() -> list[bytes]:
    # every field the Open Responses schema requires, so the gateway's completion leaves these bytes as they are
    resp = {
        "id": "resp_1", "object": "response", "created_at": 1, "completed_at": None, "status": "in_progress",
        "incomplete_details": None, "model": "tiny-wire", "previous_response_id": None, "instructions": None,
        "output": [], "error": None, "tools": [], "tool_choice": "auto", "truncation": "disabled",
        "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "top_p": 1.0, "presence_penalty": 0.0,
        "frequency_penalty": 0.0, "top_logprobs": 0, "temperature": 0.0, "reasoning": None, "usage": None,
        "max_output_tokens": None, "max_tool_calls": None, "store": False, "background": False,
        "service_tier": "default", "safety_identifier": None, "prompt_cache_key": None,
    }  # fmt: skip
    done = {
        **resp,
        "status": "completed",
        "completed_at": 2,
        "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8, "input_tokens_details": {"cached_tokens": 0}},
    }
    completed = _sse({"type": "response.completed", "sequence_number": 3, "response": done}, "response.completed")
    delta = {"type": "response.output_text.delta", "sequence_number": 2, "item_id": "m", "output_index": 0, "delta": "Hi"}
    return [
        _sse({"type": "response.created", "sequence_number": 0, "response": resp}, "response.created"),
        _sse({"type": "response.in_progress", "sequence_number": 1, "response": resp}, "response.in_progress"),
        _sse(delta, "response.output_text.delta"),
        completed[:20],
        completed[20:],
    ]


@dataclass
class ScriptedEngine:
    """Sends ``pieces[:hold]``, waits until ``released`` is set, then the rest and the end of the body."""

    pieces: list[bytes] = field(default_factory=list)
    hold: int = 0
    released: asyncio.Event | None = None
    running: int = 0

    async def loads(self, _: web.Request) -> web.Response:
        return web.json_response({"loads": [{"num_running_reqs": self.running, "num_waiting_reqs": 0}]})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.running += 1
        try:
            return await self._stream(request)
        finally:
            self.running -= 1

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i in range(len(self.pieces) + 1):
                if i == self.hold:  # hold == len(pieces): everything sent, the body not ended
                    assert self.released is not None
                    await self.released.wait()
                if i < len(self.pieces):
                    await resp.write(self.pieces[i])
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the gateway closed its side once its client went away: expected when holding
        return resp


@pytest.fixture
def scripted(gateway: GatewayThread) -> Iterator[tuple[ScriptedEngine, str]]:
    engine = ScriptedEngine()

    async def start() -> tuple[web.AppRunner, int]:
        engine.released = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", engine.handle)
        app.router.add_post("/v1/responses", engine.handle)
        app.router.add_get("/v1/loads", engine.loads)
        runner = web.AppRunner(app, handler_cancellation=True)  # a closed connection ends the request (an abort)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        return runner, int(port)

    runner, port = gateway.run(start())
    yield engine, f"http://127.0.0.1:{port}"
    gateway.call(lambda: engine.released.set() if engine.released else None)
    gateway.run(runner.cleanup())


def _register(gateway: GatewayThread, base: str, tiny_model: Path) -> Any:
    lock = make_lock()
    target = UpstreamTarget(
        base_url=base, engine_key="ek-scripted", service_id="svc-scripted", inference_id=lock.inference_id, epoch=1,
        lock=lock, wire_model="tiny-wire", tokenizer_dir=tiny_model,
    )  # fmt: skip
    return gateway.register("run-close", target)


def _read_then_close(rec: Any, route: str, body: dict[str, Any], until: bytes | None) -> bytes:
    """Read the relayed stream until ``until`` arrived whole (or to its end when None), then close."""
    seen = b""
    headers = {"Authorization": f"Bearer {token_of(rec)}"}
    with httpx.Client(timeout=30) as client, client.stream("POST", rec.base_url + route, json=body, headers=headers) as r:
        assert r.status_code == 200
        for part in r.iter_raw():
            seen += part
            if until is not None and seen.endswith(until):
                break
    return seen  # leaving both blocks closes the connection with the body unread


CHAT = {"model": "tiny-wire", "messages": [{"role": "user", "content": "hello"}], "stream": True}
RESPONSES = {"model": "tiny-wire", "input": "hello", "stream": True}


@pytest.mark.parametrize(
    ("finish", "hold", "expected"),
    [
        ("length", 3, "cancelled"),  # finish chunk relayed, usage and [DONE] not
        ("length", 4, "cancelled"),  # everything but [DONE]
        ("length", 5, "cancelled"),  # half of the [DONE] event
        ("length", 6, "incomplete"),  # [DONE] relayed, the engine's body still open
        ("stop", 6, "completed"),
        ("stop", 99, "completed"),  # the whole body, then the client closes
    ],
)
def test_chat_close_around_the_terminal_event(
    gateway: GatewayThread, scripted: tuple[ScriptedEngine, str], tiny_model: Path, finish: str, hold: int, expected: str
) -> None:
    engine, base = scripted
    engine.pieces, engine.hold = _chat_pieces(finish), hold
    rec = _register(gateway, base, tiny_model)
    sent = b"".join(engine.pieces[:hold])
    seen = _read_then_close(rec, "/chat/completions", CHAT, sent if hold <= len(engine.pieces) else None)
    assert seen == sent
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] == expected
    assert row["engine_rid"] == "rid-1" and row["ttft_ms"] is not None
    if expected != "cancelled":
        assert row["output_tokens"] == 3 and row["error_code"] is None and row["http_status"] == 200


@pytest.mark.parametrize(("hold", "expected"), [(3, "cancelled"), (4, "cancelled"), (5, "completed"), (99, "completed")])
def test_responses_close_around_the_terminal_event(
    gateway: GatewayThread, scripted: tuple[ScriptedEngine, str], tiny_model: Path, hold: int, expected: str
) -> None:
    engine, base = scripted
    engine.pieces, engine.hold = _responses_pieces(), hold
    rec = _register(gateway, base, tiny_model)
    # a resource event split across reads is held until its end (the gateway completes it), so of the pieces
    # sent the client sees the whole events: hold 4 sent half of response.completed, which stays in the gateway
    sent = b"".join(engine.pieces[:hold])
    sent = sent[: sent.rfind(b"\n\n") + 2]
    seen = _read_then_close(rec, "/responses", RESPONSES, sent if hold <= len(engine.pieces) else None)
    assert seen == sent
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] == expected and row["engine_rid"] == "resp_1"
    if expected == "completed":
        assert row["output_tokens"] == 3 and row["error_code"] is None
