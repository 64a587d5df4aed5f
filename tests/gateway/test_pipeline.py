"""The request pipeline (gateway.policy.apply_policy): parse, shape, lock, engine, in that order, each once.

A body wrong on several counts is refused by the first stage that sees a fault: its shape (what the gateway
can forward at all) before the lock (what this lock permits); a well-formed body is refused by the lock; a
body both stages accept reaches the engine with the lock's values pinned in.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.policy import apply_policy
from harness.errors import HitchError
from tests.gateway.support import make_lock

LOCK = make_lock(max_output=256)
CHAT = "/v1/chat/completions"
RESP = "/v1/responses"


def _refusal(route: str, body: dict[str, Any] | bytes) -> HitchError:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(HitchError) as info:
        apply_policy(route, raw, LOCK, "m")  # type: ignore[arg-type]
    return info.value


def test_each_stage_refuses_before_the_next_one_runs() -> None:
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    against_lock = {"model": "other", "temperature": 0.7, "max_tokens": 100000}
    # parse: not a JSON object
    assert _refusal(CHAT, b"[1, 2]").code == "inference_protocol_unsupported"
    # shape: an image in a message, though the model and sampling are against the lock too
    shape = _refusal(CHAT, {**against_lock, "messages": [{"role": "user", "content": image}]})
    assert shape.code == "inference_modality_unsupported" and shape.details["parameter"] == "messages[0].content[0].type"
    shape = _refusal(RESP, {"model": "other", "temperature": 0.7, "input": [{"type": "input_image"}]})
    assert shape.code == "inference_modality_unsupported" and shape.details["parameter"] == "input[0].type"
    # lock: a well-formed body, the first thing the lock refuses (the model it is bound to)
    lock = _refusal(CHAT, {**against_lock, "messages": [{"role": "user", "content": "hi"}]})
    assert lock.code == "inference_parameter_conflict" and lock.details["parameter"] == "model"


def test_a_body_both_stages_accept_reaches_the_engine_with_the_lock_pinned_in() -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    prepared = apply_policy(CHAT, raw, LOCK, "m")
    sent = json.loads(prepared.body)
    assert prepared.body.startswith(raw[:-1]) and sent["temperature"] == 0.0 and sent["max_completion_tokens"] == 256
    assert prepared.stream and prepared.messages == [{"role": "user", "content": "hi"}] and prepared.tools is None
