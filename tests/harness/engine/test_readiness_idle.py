"""Readiness waits for the engine to go idle before it flushes the cache (the race behind a container engine
that never became ready: SGLang refused the flush while the probe's request was still in its scheduler).

The fake engine (a real process on loopback) holds a slot in the ways SGLang does: a stream still running
(``stall_mid_stream``), or a finished request whose slot the scheduler has not freed yet
(``slot_release_lag``); and it refuses a flush for another reason (``flush_refused``). Every test here
decides its outcome by what the engine reports, never by how long something took.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fixtures.fake_sglang.client import FakeEngineProcess, start_fake_engine
from harness.engine import EngineKeys, readiness
from harness.engine.readiness import ReadinessReport, flush_when_idle
from harness.errors import HitchError

pytestmark = pytest.mark.integration


@pytest.fixture
def fake(tiny_model: Path, tmp_path: Path) -> Iterator[FakeEngineProcess]:
    admin = "ak-" + secrets.token_urlsafe(16)
    engine = start_fake_engine(tiny_model, tmp_path / "fake", served="tiny", admin_key=admin, metrics=True)
    try:
        yield engine
    finally:
        engine.stop()


def _keys(engine: FakeEngineProcess) -> EngineKeys:
    assert engine.admin_key is not None
    return EngineKeys(engine.key, engine.admin_key)


def _one_request(engine: FakeEngineProcess) -> None:
    body = {"model": "tiny", "input": "hello", "max_output_tokens": 6, "temperature": 0.0}
    r = httpx.post(engine.base + "/v1/responses", json=body, headers=engine.headers(), timeout=30)
    assert r.status_code == 200, r.text


async def _flush_while_a_stream_runs(engine: FakeEngineProcess) -> ReadinessReport:
    """Hold a stream in the engine, start the idle wait, let the wait see it busy, then close the stream."""
    body = {"model": "tiny", "input": "hello", "max_output_tokens": 64, "temperature": 0.0, "stream": True}
    report = ReadinessReport()
    async with (
        httpx.AsyncClient(timeout=60) as client,
        client.stream("POST", engine.base + "/v1/responses", json=body, headers=engine.headers()) as resp,
    ):
        assert resp.status_code == 200
        lines = resp.aiter_lines()
        while not (await anext(lines)).startswith("data:"):
            pass  # the first event arrived: the request holds its slot until the stall ends
        flushing = asyncio.ensure_future(flush_when_idle(engine.base, _keys(engine), 60.0, report))
        while report.busy_polls == 0 and not flushing.done():
            await asyncio.sleep(0.01)
        assert not flushing.done(), "the flush finished while a stream was still running in the engine"
    # the client went away: the engine aborts the request and frees its slot, and the flush goes through
    return await flushing


def test_the_flush_waits_until_the_running_request_is_gone(fake: FakeEngineProcess) -> None:
    fake.faults("stall_mid_stream:t=120,after=1")
    report = asyncio.run(_flush_while_a_stream_runs(fake))
    assert report.busy_polls >= 1
    assert report.last_load is not None and report.last_load.idle
    assert report.flush_attempts == 1 and report.flush_refusals == []
    assert report.idle_wait_s is not None and report.idle_wait_s > 0
    assert fake.state()["num_running_reqs"] == 0


def test_an_engine_that_never_goes_idle_fails_with_its_counts(fake: FakeEngineProcess) -> None:
    fake.faults("slot_release_lag:t=600")
    _one_request(fake)  # answered, but its slot stays taken for ten minutes
    with pytest.raises(HitchError) as caught:
        asyncio.run(flush_when_idle(fake.base, _keys(fake), 1.5))
    err = caught.value
    assert err.code == "inference_start_timeout"
    assert err.details["step"] == "idle"
    assert (err.details["running"], err.details["waiting"]) == (1, 0)
    assert "1 running and 0 waiting" in err.message


def test_a_flush_refused_for_pending_requests_is_retried_until_the_bound(
    fake: FakeEngineProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine that does not report its load (no ``/v1/loads``, as before SGLang had one): readiness goes by
    the flush's own answers, retries a refusal for pending requests, and says why when the bound runs out."""
    fake.faults("slot_release_lag:t=600")
    _one_request(fake)  # answered, but its slot stays taken for ten minutes
    monkeypatch.setattr(readiness, "LOADS_PATH", "/no/such/route")
    with pytest.raises(HitchError) as caught:
        asyncio.run(flush_when_idle(fake.base, _keys(fake), 1.5))
    err = caught.value
    assert err.code == "inference_start_timeout"
    assert err.details["step"] == "flush_cache" and err.details["attempts"] >= 1
    assert err.details["body"] in ("Flush cache failed.", "Timed out waiting for idle state.")


def test_a_flush_refused_for_another_reason_fails_readiness_with_the_engines_text(fake: FakeEngineProcess) -> None:
    fake.faults("flush_refused:msg=Flush failed: storage backend error.")
    with pytest.raises(HitchError) as caught:
        asyncio.run(flush_when_idle(fake.base, _keys(fake), 30.0))
    err = caught.value
    assert err.code == "inference_engine_unhealthy"
    assert err.details["step"] == "flush_cache" and err.details["status"] == 400
    assert err.details["body"] == "Flush failed: storage backend error."
    assert "storage backend error" in err.message


def test_a_wrong_admin_key_is_not_mistaken_for_pending_requests(fake: FakeEngineProcess) -> None:
    with pytest.raises(HitchError) as caught:
        asyncio.run(flush_when_idle(fake.base, EngineKeys(fake.key, "ak-wrong"), 30.0))
    assert caught.value.code == "inference_engine_unhealthy"
    assert caught.value.details["status"] == 401
