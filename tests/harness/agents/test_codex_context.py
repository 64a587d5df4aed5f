"""Codex recognises a context overflow from the gateway (issue 28 item 9): the gateway answers OpenAI's own code,
``context_length_exceeded`` (the table's ``inference_context_exceeded`` in ``details`` and in the evidence row),
so Codex stops the turn as a context-window failure after one request, never retrying it. Real Codex through a
real gateway to the fake engine; needs the pinned binary (``make codex``), skipped without it unless
``HITCH_REQUIRE_CODEX`` is set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from certify.kit.agents import AgentRig
from harness.agents.codex_home import CodexBinding
from harness.agents.codex_install import CodexInstall
from harness.agents.codex_runner import CodexRun
from tests.gateway.support import make_lock


@pytest.mark.integration
def test_codex_stops_on_the_gateways_context_overflow(codex: CodexInstall, tmp_path: Path, tiny_model: Path) -> None:
    with AgentRig(tmp_path / "rig", tiny_model, make_lock(context=2048, max_output=256), [{"text": "never"}]) as rig:
        work = tmp_path / "work"
        work.mkdir()
        binding = CodexBinding(rig.base_url, rig.served, 2048, stream_idle_timeout_ms=120_000)
        run = CodexRun(codex, binding, rig.token, home=tmp_path / "home", workdir=work, prompt="Say hello.")
        out = run.run(timeout_s=300)
        rows = rig.evidence_rows()
        engine = rig.engine_requests()
    print("codex errors:", out.errors)
    assert out.returncode != 0 and not out.completed
    assert [(r["status"], r["error_code"]) for r in rows] == [("rejected", "inference_context_exceeded")]  # one, no retry
    assert engine == []
    assert any("context window" in e.lower() for e in out.errors), out.errors
