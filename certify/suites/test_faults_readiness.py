"""faults (readiness): the engine still holds a request when readiness wants to flush its cache.

SGLang frees a finished request's slot in its scheduler loop, after the reply's last byte, and refuses
``/flush_cache`` while any request runs or waits. Readiness therefore waits until the engine reports itself
idle, flushes once (SGLang's deferred ``?timeout=`` flush), retries a refusal for pending requests within its
bound, and fails with the engine's counts or text otherwise (``harness.engine.readiness``). These checks run
that last step of readiness against the session's engine while it is held busy:

- on the fake, by its ``slot_release_lag`` fault (a finished request's slot stays taken until the fault is
  removed) and ``flush_refused`` (a refusal that is not about pending requests);
- on real SGLang, by a long generation sent straight to the engine and closed by the check (the engine then
  aborts it).

Every outcome is decided by what the engine reports (busy polls seen, the flush's answer), never by time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from certify.kit.faults import FAKE, MODE_CHECKS, fault_kind
from certify.kit.probes import engine_load, session_lock, wait_until
from certify.kit.white_box import EngineKeys, ReadinessReport, flush_when_idle, load_keys, probe_tool_call
from certify.registry import check
from certify.secrets_scan import remember
from certify.session import CertifyEnv
from harness.errors import HitchError

pytestmark = pytest.mark.exclusive_engine  # every check holds the session engine's slots

_fault_kind = fault_kind("readiness")

_BOUND_S = 120.0  # readiness's bound for the check that waits (the check ends the hold itself)
_SHORT_BOUND_S = 1.0  # the bound an engine held busy must outlast


def _keys(env: CertifyEnv) -> EngineKeys:
    keys = load_keys(env.root, env.run.service_id)
    if env.ledger is not None:  # the secrets scan looks for the admin key in every output too
        remember(env.ledger, "engine_admin_key", keys.admin_key)
    return keys


@asynccontextmanager
async def _held(env: CertifyEnv) -> AsyncIterator[None]:
    """A request the engine holds until the block ends: on the fake, a finished request whose slot lags
    (released when the fault is cleared); on SGLang, a long generation read up to its first event and then
    closed (the engine aborts it)."""
    if env.fake is not None:
        env.fake.faults("slot_release_lag:t=3600")
        body = {"model": env.run.wire_model, "input": "hello", "max_output_tokens": 4, "temperature": 0.0}
        async with httpx.AsyncClient(timeout=60) as client:
            r = await client.post(env.engine_url + "/v1/responses", json=body, headers=env.engine_headers())
        assert r.status_code == 200, r.text
        try:
            yield
        finally:
            env.fake.faults()  # the lag ends: its slot is free at once
        return
    context = session_lock(env).execution.context_tokens_per_request
    params = {"max_new_tokens": max(256, min(4000, context - 64)), "temperature": 0.0, "ignore_eos": True}
    body = {"text": "Count from one upwards.", "stream": True, "sampling_params": params}
    async with (
        httpx.AsyncClient(timeout=120) as client,
        client.stream("POST", env.engine_url + "/generate", json=body, headers=env.engine_headers()) as resp,
    ):
        assert resp.status_code == 200, await resp.aread()
        lines = resp.aiter_lines()  # kept: dropping the generator would close the stream
        while not (await anext(lines)).startswith("data:"):
            pass  # the first token arrived: the request runs
        yield


def _engine_idle(env: CertifyEnv) -> None:
    wait_until(lambda: engine_load(env.engine_url, env.engine_headers()) == 0, 120.0, what="the engine idle again")


@check(
    MODE_CHECKS["slot_release_lag"],
    description="readiness's flush waits while the engine reports a running request, then flushes once",
    summary=lambda d: (
        "while the engine held a request, readiness found it busy {busy_polls} times, waited {idle_wait_s} s and "
        "flushed after {flush_attempts} attempt(s)".format(**d["readiness"])
    ),
)
def test_flush_waits_for_idle(certify_env: CertifyEnv, certify_record: Any) -> None:
    env = certify_env
    report = ReadinessReport()

    async def go() -> tuple[bool, ReadinessReport]:
        async with _held(env):
            flushing = asyncio.ensure_future(flush_when_idle(env.engine_url, _keys(env), _BOUND_S, report))
            while report.busy_polls == 0 and not flushing.done():
                await asyncio.sleep(0.01)
            done_while_held = flushing.done()
        return done_while_held, await flushing

    done_while_held, got = asyncio.run(go())
    certify_record.detail(
        "readiness",
        {
            "busy_polls": got.busy_polls,
            "idle_wait_s": got.idle_wait_s,
            "flush_attempts": got.flush_attempts,
            "refusals": got.flush_refusals,
        },
    )
    assert not done_while_held, "the flush ended while the engine still held a request"
    assert got.busy_polls >= 1 and got.last_load is not None and got.last_load.idle
    assert got.flush_attempts >= 1 and got.flushed_s is not None
    _engine_idle(env)


@check(
    "faults.slot_release_lag.never_idle",
    description="an engine that stays busy past readiness's bound fails the start with its running count",
    summary=lambda d: (
        f"an engine kept busy past the bound failed the start at step {d['error']['details']['step']}: {d['error']['message']}"
    ),
)
def test_never_idle_fails_with_counts(certify_env: CertifyEnv, certify_record: Any) -> None:
    env = certify_env

    async def go() -> HitchError:
        async with _held(env):
            try:
                await flush_when_idle(env.engine_url, _keys(env), _SHORT_BOUND_S)
            except HitchError as exc:
                return exc
        raise AssertionError("the flush succeeded while the engine held a request")

    err = asyncio.run(go())
    certify_record.detail("error", {"code": err.code, "message": err.message, "details": err.details})
    assert err.code == "inference_start_timeout"
    # the engine's load count said busy (step idle), or it lagged and the engine's own deferred flush was
    # refused for pending requests until the bound ran out (step flush_cache): both name the reason
    if err.details["step"] == "idle":
        assert err.details["running"] + err.details["waiting"] >= 1
    else:
        assert err.details["step"] == "flush_cache" and err.details["attempts"] >= 1
        assert str(err.details["body"]).startswith(("Flush cache failed", "Timed out waiting for idle state"))
    _engine_idle(env)


@check(
    MODE_CHECKS["flush_refused"],
    engines=FAKE,
    description="a flush refused for another reason than pending requests fails readiness with the engine's text",
    reason="real SGLang refuses a flush only while requests run or wait; another refusal is staged on the fake",
    summary="a flush refused for another reason failed readiness with {error[code]}: {error[message]}",
)
def test_flush_refused_otherwise_fails(certify_env: CertifyEnv, certify_record: Any) -> None:
    env = certify_env
    assert env.fake is not None
    env.fake.faults("flush_refused:msg=Flush failed: storage backend error.")
    try:
        with pytest.raises(HitchError) as caught:
            asyncio.run(flush_when_idle(env.engine_url, _keys(env), 30.0))
    finally:
        env.fake.faults()
    err = caught.value
    certify_record.detail("error", {"code": err.code, "message": err.message, "status": err.details.get("status")})
    assert err.code == "inference_engine_unhealthy"
    assert (err.details["step"], err.details["status"]) == ("flush_cache", 400)
    assert err.details["body"] == "Flush failed: storage backend error."


@check(
    MODE_CHECKS["unparsed_tool_calls"],
    engines=FAKE,
    description="an engine that hands forced tool calls back as text fails the tool-call probe that the service of a "
    "run needing tool calls must pass (spec 9.1 step 5); the same engine without the fault passes it",
    reason="only the fake can be made to drop its parser's structure; a real lock's parser is checked in /server_info "
    "and SmolLM2's structured calls by the correctness suite's tool-call checks",
    summary=lambda d: (
        f"without the fault the probe passed ({d['passed_s']} s); with calls handed back as text it failed at step "
        f"{d['error']['details'].get('step')}: {d['error']['message']}"
    ),
)
def test_unparsed_tool_calls_fail_the_probe(certify_env: CertifyEnv, certify_record: Any) -> None:
    env = certify_env
    assert env.fake is not None and session_lock(env).protocol.tool_calls, "the session's lock claims no tool calls"
    key = _keys(env).api_key
    passed_s = asyncio.run(probe_tool_call(env.engine_url, key, env.run.wire_model, 60.0))
    env.fake.faults("unparsed_tool_calls")
    try:
        with pytest.raises(HitchError) as caught:
            asyncio.run(probe_tool_call(env.engine_url, key, env.run.wire_model, 60.0))
    finally:
        env.fake.faults()
    err = caught.value
    certify_record.detail("passed_s", passed_s)
    certify_record.detail("error", {"code": err.code, "message": err.message, "details": err.details})
    assert err.code == "inference_engine_unhealthy" and err.details.get("step") == "tool_call", err.to_dict()
