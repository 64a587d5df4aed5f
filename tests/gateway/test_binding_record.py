"""The binding the gateway issues for a run is the typed record of spec §10.1: ``kind`` managed-local, the lock's
``api``, the variable a harness reads its token from, and the lock's capabilities — and never the token."""

from __future__ import annotations

from pathlib import Path

from harness.settings import env_name
from tests.gateway.support import Engine, GatewayThread, make_lock, target_for, token_of


def test_the_issued_binding_carries_the_locks_api_and_capabilities_and_no_secret(engine: Engine, gateway: GatewayThread) -> None:
    lock = make_lock()
    rec = gateway.register("run-a", target_for(engine, lock))
    assert rec.kind == "managed-local"
    assert rec.api == lock.protocol.api
    assert rec.credential_env_name == env_name("local_model_token")
    assert rec.capabilities is not None
    assert rec.capabilities.streaming == lock.protocol.streaming
    assert rec.capabilities.tool_calls == lock.protocol.tool_calls
    assert rec.capabilities.parallel_tool_calls == lock.protocol.parallel_tool_calls
    assert rec.capabilities.input_modalities == ["text"]
    token = token_of(rec)
    assert token and token not in rec.model_dump_json()
    assert Path(rec.token_ref).read_text(encoding="utf-8").strip() == token
