"""protocol: a stream closed mid-way leaves no running request behind, and the next request succeeds."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from certify.kit import answers
from certify.kit.answers import PROMPT, SMALL
from certify.kit.probes import wait_for
from certify.kit.requests import engine_running, gw_post
from certify.registry import check
from certify.session import CertifyEnv

# -- cancellation and the model list -------------------------------------------------------------------------


_TERMINAL = (b"response.completed", b"response.incomplete", b"response.failed")


def _stream_then_close(env: CertifyEnv, prompt: str) -> tuple[bool, int, int]:
    """Open a Responses stream, read until the engine is seen running it, close mid-way.

    Returns (closed mid-way, engine requests seen running just before the close, bytes read). Real SGLang
    publishes its load snapshot every 15 decode steps, so the stream is read on until the request shows.
    """
    run = env.run
    body = {"model": run.wire_model, "input": prompt, "stream": True}
    busy, seen = 0, b""
    deadline = time.monotonic() + 60
    with httpx.stream("POST", run.base_url + "/responses", json=body, headers=run.headers(), timeout=60) as r:
        assert r.status_code == 200, r.read()[:300]
        chunks = r.iter_raw()  # keep a reference: a collected iterator closes the connection
        for chunk in chunks:
            seen += chunk
            if any(t in seen for t in _TERMINAL):
                break
            if b"response.output_text.delta" in seen:
                busy = engine_running(env)
                if busy >= 1 or time.monotonic() > deadline:
                    break
        mid_way = not any(t in seen for t in _TERMINAL)
    return mid_way, busy, len(seen)


@pytest.mark.exclusive_engine
@pytest.mark.quiet
@check(
    "protocol.cancel.stream",
    description="a stream closed mid-way leaves no running request; the next request succeeds",
    summary=lambda d: (
        f"a stream closed mid-way left no running request (freed in {d['attempts'][-1]['freed_s']} s); the next request succeeded"
    ),
)
def test_cancel_stream(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    fake = certify_env.fake
    if fake is not None:
        fake.faults("stall_mid_stream:t=20,after=6")  # hold the stream open so the close lands mid-way
    attempts: list[dict[str, Any]] = []
    try:
        # A random-weights model may stop early: a few prompts until one stream is closed while running.
        for prompt in ("Count to one thousand.", "List every prime below ten thousand.", "Repeat 'a' forever."):
            mid_way, busy, nbytes = _stream_then_close(certify_env, prompt)
            closed_at = time.monotonic()
            freed = wait_for(lambda: engine_running(certify_env) == 0, 10.0)
            freed_s = time.monotonic() - closed_at
            attempts.append({"closed_mid_way": mid_way, "busy_before_close": busy, "bytes": nbytes, "freed_s": round(freed_s, 3)})
            assert freed, f"the engine still runs {engine_running(certify_env)} request(s) 10 s after the client closed"
            if mid_way and busy >= 1:
                break
    finally:
        if fake is not None:
            fake.faults()
        certify_record.detail("attempts", attempts)
    last = attempts[-1]
    assert last["closed_mid_way"] and last["busy_before_close"] >= 1, "no stream was seen running before it was closed"
    certify_record.metric("protocol.cancel.freed_s", last["freed_s"])
    if fake is not None:
        assert fake.state()["leaked_slots"] == 0
    resp = answers.ok_body(gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": SMALL}))
    answers.check_response(resp, SMALL)
