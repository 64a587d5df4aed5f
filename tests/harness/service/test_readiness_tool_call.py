"""The tool-call probe (spec §9.1 step 5: readiness checks Responses, SSE and tool calls *as the caller needs*):
a call forced to one probe tool must come back as a structured ``function_call`` of that tool. On the fake
engine as a real process: with the ``hermes`` parser it hands the forced call back structured, as SGLang does
for SmolLM2 (``tests/fixtures/test_smollm2_tool_calls.py``); under the ``unparsed_tool_calls`` fault it answers
calls as text, which the probe refuses. A test's scripted text turn is never eaten by the forced probe."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fixtures.fake_sglang.client import FakeEngineProcess, start_fake_engine
from harness.engine.readiness import probe_tool_call
from harness.errors import HitchError

pytestmark = pytest.mark.integration


@pytest.fixture
def hermes(tiny_model: Path, tmp_path: Path) -> Iterator[FakeEngineProcess]:
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"text": "a scripted answer"}) + "\n")
    engine = start_fake_engine(
        tiny_model, tmp_path / "fake", "--tool-call-parser", "hermes", "--fake-script", str(script), served="tiny"
    )
    try:
        yield engine
    finally:
        engine.stop()


def test_a_forced_call_comes_back_structured_and_the_scripted_text_stays_for_the_next_request(
    hermes: FakeEngineProcess,
) -> None:
    seconds = asyncio.run(probe_tool_call(hermes.base, hermes.key or "", "tiny", 60.0))
    assert seconds >= 0
    body = {"model": "tiny", "input": "hello", "max_output_tokens": 32, "temperature": 0.0}
    answer = httpx.post(hermes.base + "/v1/responses", json=body, headers=hermes.headers(), timeout=30).json()
    assert answer["output"][0]["content"][0]["text"] == "a scripted answer"


def test_calls_handed_back_as_text_fail_the_probe(hermes: FakeEngineProcess) -> None:
    hermes.faults("unparsed_tool_calls")
    with pytest.raises(HitchError) as caught:
        asyncio.run(probe_tool_call(hermes.base, hermes.key or "", "tiny", 60.0))
    err = caught.value
    assert err.code == "inference_engine_unhealthy" and err.details["step"] == "tool_call", err.to_dict()
    assert err.details["items"] == ["message"]
