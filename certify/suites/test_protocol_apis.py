"""protocol: Responses and chat completions through the gateway, stream and non-stream, raw HTTP and the
official ``openai`` SDK; ``GET /v1/models`` lists only the run's wire model.

Real SGLang here runs a tiny random-weights model: its text is garbage and it may stop early, so the checks
assert protocol shape and counts, never text (the shapes: :mod:`certify.kit.answers`).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from certify.kit import answers
from certify.kit.answers import PROMPT, SMALL
from certify.kit.requests import gw_post, gw_stream
from certify.registry import check
from certify.session import CertifyEnv
from gateway.sse import parse_events

# -- Responses and chat, stream and non-stream ---------------------------------------------------------------


@check(
    "protocol.responses.nonstream",
    description="POST /v1/responses (non-stream) answers a well-formed response",
    summary="a non-stream Responses request answered {status} with usage ({usage[input_tokens]} in, {usage[output_tokens]} out)",
)
def test_responses_nonstream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    r = gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": SMALL})
    resp = answers.ok_body(r)
    answers.check_response(resp, SMALL)
    assert r.headers.get("x-hitch-request-id"), "no gateway request id header"
    certify_record.detail("status", resp["status"])
    certify_record.detail("usage", resp["usage"])


@check(
    "protocol.responses.stream",
    description="POST /v1/responses (stream) sends typed events ending in a terminal event",
    summary="a streamed Responses request sent {events} typed events ending in {terminal}",
)
def test_responses_stream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    r, raw = gw_stream(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": SMALL, "stream": True})
    assert r.status_code == 200, raw[:500]
    assert r.headers.get("content-type", "").startswith("text/event-stream")
    events = parse_events(raw)
    final = answers.check_responses_stream(events, SMALL)
    certify_record.detail("events", len(events))
    certify_record.detail("terminal", events[-1].event)
    certify_record.detail("usage", final["usage"])


@check(
    "protocol.chat.nonstream",
    description="POST /v1/chat/completions (non-stream) answers a well-formed completion",
    summary=(
        "a non-stream chat completion answered with finish {finish_reason} and usage ({usage[prompt_tokens]} "
        "in, {usage[completion_tokens]} out)"
    ),
)
def test_chat_nonstream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    body = {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": SMALL}
    resp = answers.ok_body(gw_post(run, "/chat/completions", body))
    choice = answers.check_chat(resp, SMALL)
    assert resp.get("model") == run.wire_model, resp.get("model")
    certify_record.detail("finish_reason", choice["finish_reason"])
    certify_record.detail("usage", resp["usage"])


@check(
    "protocol.chat.stream",
    description="POST /v1/chat/completions (stream) sends chunks, usage and [DONE]",
    summary="a streamed chat completion sent its chunks, usage and [DONE] (finish {finish_reason})",
)
def test_chat_stream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    body = {
        "model": run.wire_model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": SMALL,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r, raw = gw_stream(run, "/chat/completions", body)
    assert r.status_code == 200, raw[:500]
    assert r.headers.get("content-type", "").startswith("text/event-stream")
    _, finish, usage = answers.check_chat_stream(raw, SMALL)
    certify_record.detail("finish_reason", finish)
    certify_record.detail("usage", usage)


@check(
    "protocol.sdk.openai",
    description="the official openai SDK works unchanged (Responses and chat, stream and not)",
    summary="the official openai SDK works unchanged: {chat_stream_chunks} chat chunks streamed, Responses events typed",
)
def test_openai_sdk(certify_env: CertifyEnv, certify_record: Any) -> None:
    import openai

    run = certify_env.run
    client = openai.OpenAI(base_url=run.base_url, api_key=run.token, max_retries=0, timeout=300)
    resp = client.responses.create(model=run.wire_model, input=PROMPT, max_output_tokens=SMALL)
    assert resp.status in ("completed", "incomplete") and resp.usage is not None
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    kinds: list[str] = []
    final = None
    # responses.create(stream=True), not the responses.stream() helper: the helper insists on
    # response.completed, and a budget-limited stream legitimately ends with response.incomplete.
    for event in client.responses.create(model=run.wire_model, input=PROMPT, max_output_tokens=SMALL, stream=True):
        kinds.append(event.type)
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert final is not None, f"no terminal event in {kinds}"
    assert final.usage is not None and final.usage.output_tokens <= SMALL
    chat = client.chat.completions.create(model=run.wire_model, messages=[{"role": "user", "content": PROMPT}], max_tokens=SMALL)
    assert chat.usage is not None and chat.usage.completion_tokens <= SMALL
    chunks = list(
        client.chat.completions.create(
            model=run.wire_model,
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=SMALL,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks and chunks[-1].usage is not None
    certify_record.detail("sdk_version", openai.__version__)
    certify_record.detail("responses_stream_events", sorted(set(kinds)))
    certify_record.detail("chat_stream_chunks", len(chunks))


@check(
    "protocol.models.wire_only",
    description="GET /v1/models lists only the run's wire model",
    summary="GET /v1/models lists only the run's wire model {wire_model}",
)
def test_models_wire_only(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    r = httpx.get(run.base_url + "/models", headers=run.headers(), timeout=30)
    body = answers.ok_body(r)
    assert body.get("object") == "list"
    ids = [m.get("id") for m in body.get("data", [])]
    assert ids == [run.wire_model], ids
    card = body["data"][0]
    assert card.get("root") in (None, run.wire_model), card
    assert "/" not in json.dumps(card.get("root") or ""), "the card leaks a path"
    # The engine may serve other names (LoRA adapters, its model path); the run sees only the wire model.
    r2 = httpx.get(run.base_url + "/models/" + run.wire_model, headers=run.headers(), timeout=30)
    assert r2.status_code == 404 and r2.json()["error"]["code"] == "inference_route_unavailable", r2.text[:300]
    certify_record.detail("wire_model", run.wire_model)
    certify_record.detail("card", card)
