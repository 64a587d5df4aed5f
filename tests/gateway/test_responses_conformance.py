"""The gateway's Responses answers conform to the Open Responses schema (issue 48), through a real gateway in
front of the fake engine: unary answers and every streaming event validate against the reference schema
(``certify/open_responses_schema.json``, with ``jsonschema``), the engine's own answer does not (the fake is
faithful to SGLang, whose answers lack the fields), nothing the engine said is altered, text deltas pass as
the engine's bytes, and the evidence row names what the gateway filled."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from certify.open_responses import resource_errors, stream_errors
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, target_for, token_of

pytestmark = pytest.mark.integration

_LOCK_SAMPLING = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _auth(rec: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_of(rec)}"}


def _body(stream: bool, **extra: Any) -> dict[str, Any]:
    return {"model": "tiny-wire", "input": "hello", "max_output_tokens": 6, "stream": stream, **extra}


def _direct(engine: Engine, body: dict[str, Any]) -> bytes:
    """The engine's own answer to the body the gateway sends (lock sampling, store false, budget + 2)."""
    sent = {**body, **_LOCK_SAMPLING, "store": False, "max_output_tokens": body["max_output_tokens"] + 2}
    r = httpx.post(engine.base + "/v1/responses", json=sent, headers={"Authorization": f"Bearer {engine.key}"}, timeout=30)
    assert r.status_code == 200
    return r.content


def _events(raw: bytes) -> list[tuple[bytes, dict[str, Any]]]:
    out = []
    for block in raw.split(b"\n\n"):
        if block.strip():
            _, data = block.split(b"\n", 1)
            out.append((block, json.loads(data.removeprefix(b"data: "))))
    return out


def _same_or_filled(engine_obj: Any, ours: Any, path: str = "") -> None:
    """``ours`` holds every value the engine said, unchanged; it differs only where the engine said null."""
    if isinstance(engine_obj, dict):
        assert isinstance(ours, dict), path
        for key, value in engine_obj.items():
            if key in ("id", "created_at", "call_id", "item_id", "completed_at"):
                continue  # per-answer identities and times
            assert key in ours, f"{path}.{key} was dropped"
            if value is not None:
                _same_or_filled(value, ours[key], f"{path}.{key}")
    elif isinstance(engine_obj, list):
        assert isinstance(ours, list) and len(ours) == len(engine_obj), path
        for i, (a, b) in enumerate(zip(engine_obj, ours, strict=True)):
            _same_or_filled(a, b, f"{path}[{i}]")
    else:
        assert ours == engine_obj, path


@pytest.mark.parametrize("tools", [False, True], ids=["text", "forced_tool"])
def test_a_unary_answer_conforms_and_keeps_what_the_engine_said(engine: Engine, gateway: GatewayThread, tools: bool) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    extra = {"tools": [_TOOL], "tool_choice": {"type": "function", "name": "get_weather"}} if tools else {}
    body = _body(False, **extra)
    r = httpx.post(rec.base_url + "/responses", json=body, headers=_auth(rec), timeout=30)
    assert r.status_code == 200
    ours = r.json()
    assert resource_errors(ours) == []
    direct = json.loads(_direct(engine, body))
    assert resource_errors(direct) != []  # what SGLang (and so the fake) leaves out
    _same_or_filled(direct, ours)
    assert (ours["background"], ours["service_tier"], ours["max_tool_calls"], ours["top_logprobs"]) == (False, "default", None, 0)
    assert (ours["top_p"], ours["presence_penalty"], ours["frequency_penalty"]) == (1.0, 0.0, 0.0)  # the lock's
    assert isinstance(ours["completed_at"], int) and ours["completed_at"] >= ours["created_at"]
    if tools:
        assert [item["type"] for item in ours["output"]][-1] == "function_call"
    else:
        assert ours["output"][0]["content"][0]["logprobs"] == []
    [row] = evidence_rows(gateway, rec.binding_id)
    assert {"completed_at", "background", "service_tier", "presence_penalty"} <= set(row["completed_fields"])
    assert ("logprobs" in row["completed_fields"]) is not tools


@pytest.mark.parametrize("tools", [False, True], ids=["text", "forced_tool"])
def test_every_stream_event_conforms_and_text_deltas_are_the_engines(engine: Engine, gateway: GatewayThread, tools: bool) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    extra = {"tools": [_TOOL], "tool_choice": {"type": "function", "name": "get_weather"}} if tools else {}
    body = _body(True, **extra)
    with httpx.stream("POST", rec.base_url + "/responses", json=body, headers=_auth(rec), timeout=30) as r:
        assert r.status_code == 200
        raw = b"".join(r.iter_raw())
    ours = _events(raw)
    assert stream_errors([obj for _, obj in ours]) == []
    direct = _events(_direct(engine, body))
    assert stream_errors([obj for _, obj in direct]) != []
    assert [obj["type"] for _, obj in ours] == [obj["type"] for _, obj in direct]
    for (block, obj), (engine_block, engine_obj) in zip(ours, direct, strict=True):
        _same_or_filled(engine_obj, obj)
        if obj["type"].endswith(".delta"):  # untouched: the same keys in the same order, as the engine wrote them
            assert list(obj) == list(engine_obj)
            assert block.replace(obj.get("item_id", "").encode(), b"") == engine_block.replace(
                engine_obj.get("item_id", "").encode(), b""
            )
    terminal = ours[-1][1]["response"]
    assert isinstance(terminal["completed_at"], int) and ours[0][1]["response"]["completed_at"] is None
    assert ours[0][1]["response"]["text"] == {"format": {"type": "text"}}
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["status"] in ("completed", "incomplete") and "text" in row["completed_fields"]


def test_events_coalesced_or_split_across_reads_still_conform(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    for fault in ("coalesce_events:n=4", "split_utf8"):
        engine.faults(fault)
        with httpx.stream("POST", rec.base_url + "/responses", json=_body(True), headers=_auth(rec), timeout=30) as r:
            raw = b"".join(r.iter_raw())
        assert stream_errors([obj for _, obj in _events(raw)]) == [], fault


def test_the_gateways_own_failed_event_conforms(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-idle", target_for(engine, make_lock(stream_idle_ms=700)))
    engine.faults("stall_mid_stream:t=60,after=4")
    with httpx.stream("POST", rec.base_url + "/responses", json=_body(True), headers=_auth(rec), timeout=30) as r:
        raw = b"".join(r.iter_raw())
    events = [obj for _, obj in _events(raw)]
    assert stream_errors(events) == []
    failed = events[-1]
    assert failed["type"] == "response.failed" and failed["response"]["error"]["code"] == "inference_stream_idle_timeout"
    assert failed["response"]["id"] == events[0]["response"]["id"]
    [row] = evidence_rows(gateway, rec.binding_id)
    assert (row["status"], row["error_code"]) == ("failed", "inference_stream_idle_timeout")


def test_chat_answers_are_not_completed(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    body = {"model": "tiny-wire", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    r = httpx.post(rec.base_url + "/chat/completions", json=body, headers=_auth(rec), timeout=30)
    assert r.status_code == 200 and "completed_at" not in r.json()
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["completed_fields"] is None


@pytest.mark.parametrize(
    ("method", "tail"),
    [
        ("POST", "/responses/compact"),
        ("GET", "/responses/resp_0123abc"),
        ("DELETE", "/responses/resp_0123abc"),
        ("POST", "/responses/resp_0123abc/cancel"),
        ("GET", "/responses/resp_0123abc/input_items"),
    ],
)
def test_responses_routes_not_offered_are_refused_as_unsupported(
    engine: Engine, gateway: GatewayThread, method: str, tail: str
) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    r = httpx.request(method, rec.base_url + tail, json={"model": "tiny-wire", "input": "hi"}, headers=_auth(rec), timeout=30)
    assert r.status_code == 404
    error = r.json()["error"]
    assert (error["code"], error["type"]) == ("inference_route_unsupported", "invalid_request_error")
    assert "not supported" in error["message"] and tail.split("/")[-1] in error["message"]
    assert engine.posts() == []  # never reached the engine
    other = httpx.get(rec.base_url.replace("/v1", "") + "/server_info", headers=_auth(rec), timeout=30)
    assert other.json()["error"]["code"] == "inference_route_unavailable"  # not an API route at all: unchanged


@pytest.mark.parametrize("part", ["input_image", "input_file"])
def test_image_and_file_input_stay_a_clear_400(engine: Engine, gateway: GatewayThread, part: str) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    item = {"type": part, "image_url": "data:image/png;base64,AAAA"} if part == "input_image" else {"type": part, "file_id": "f"}
    body = {"model": "tiny-wire", "input": [{"role": "user", "content": [{"type": "input_text", "text": "what?"}, item]}]}
    r = httpx.post(rec.base_url + "/responses", json=body, headers=_auth(rec), timeout=30)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "inference_modality_unsupported" and part in error["message"]
    assert engine.posts() == []


def test_a_refused_responses_request_names_no_completion(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock(context=256)))
    r = httpx.post(rec.base_url + "/responses", json=_body(False, input="hello " * 400), headers=_auth(rec), timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"  # after the policy passed
    [row] = evidence_rows(gateway, rec.binding_id)
    assert row["completed_fields"] is None and row["status"] == "rejected"
