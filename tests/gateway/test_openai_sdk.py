"""The official openai SDK works through the gateway unchanged: Responses and chat, stream and not.

Against the fake engine always; against real SGLang (generic-CPU runtime) when it is installed under
HITCH_ROOT (skipped otherwise, a failure under HITCH_REQUIRE_SGLANG=1).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from openai import OpenAI

from fixtures.fake_sglang.parity_engines import launch_engine
from gateway.bindings import UpstreamTarget
from tests.components import sglang_engine_command
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, target_for, token_of

pytestmark = pytest.mark.integration


@dataclass
class Upstream:
    target: UpstreamTarget
    model: str


def _exercise(gateway: GatewayThread, up: Upstream) -> None:
    rec = gateway.register("run-sdk", up.target)
    client = OpenAI(base_url=rec.base_url, api_key=token_of(rec), max_retries=0, timeout=120)
    assert [m.id for m in client.models.list()] == [up.model]

    r = client.responses.create(model=up.model, input="Say hi", max_output_tokens=6)
    assert r.usage is not None and r.usage.output_tokens <= 6 and r.id

    events = list(client.responses.create(model=up.model, input="Say hi", max_output_tokens=6, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert "".join(deltas) == final.response.output_text

    c = client.chat.completions.create(model=up.model, messages=[{"role": "user", "content": "Say hi"}], max_tokens=5)
    assert c.choices[0].message.content is not None and c.usage is not None and c.usage.completion_tokens <= 5

    chunks = list(
        client.chat.completions.create(
            model=up.model, messages=[{"role": "user", "content": "Say hi"}], max_tokens=5, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert chunks[-1].usage is not None and isinstance(text, str)

    rows = evidence_rows(gateway, rec.binding_id)
    assert [row["status"] in ("completed", "incomplete") for row in rows] == [True] * 5
    assert all(row["engine_rid"] for row in rows[1:])
    streamed = [row for row in rows if row["stream"]]
    assert len(streamed) == 2 and all(row["ttft_ms"] is not None for row in streamed)


def test_openai_sdk_against_the_fake_engine(engine: Engine, gateway: GatewayThread) -> None:
    _exercise(gateway, Upstream(target_for(engine, make_lock()), engine.served))


@pytest.fixture(scope="module")
def real_sglang(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    command = sglang_engine_command()
    key = "sk-" + secrets.token_urlsafe(16)
    running = launch_engine(command, tiny_model, tmp_path_factory.mktemp("sglang"), key, "adm-" + key, ready_timeout_s=240.0)
    try:
        lock = make_lock(context=2048, max_output=64)
        target = UpstreamTarget(
            base_url=running.base, engine_key=key, service_id="svc-sglang", inference_id=lock.inference_id, epoch=1,
            lock=lock, wire_model=running.served, tokenizer_dir=tiny_model,
        )  # fmt: skip
        yield Upstream(target, running.served)
    finally:
        running.stop()


@pytest.mark.needs_sglang
@pytest.mark.slow
@pytest.mark.xdist_group("sglang")
def test_openai_sdk_against_real_sglang(real_sglang: Upstream, gateway: GatewayThread) -> None:
    _exercise(gateway, real_sglang)
