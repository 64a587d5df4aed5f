"""Codex end to end through a real gateway to the scripted fake engine (tool loop and agent_args guard).

Needs the pinned Codex (``make codex``): skipped without it unless ``HITCH_REQUIRE_CODEX`` is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from certify.kit.agents import AgentRig
from harness.agents.codex_home import CodexBinding
from harness.agents.codex_install import CodexInstall
from harness.agents.codex_runner import CodexRun
from harness.errors import HitchError
from tests.gateway.support import make_lock

pytestmark = pytest.mark.integration


@pytest.fixture
def rig(tmp_path: Path, tiny_model: Path) -> Iterator[AgentRig]:
    model = tiny_model
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "sed -i s/count=1/count=2/ notes.txt"}}]},
        {"text": "done"},
    ]
    with AgentRig(tmp_path / "rig", model, make_lock(context=8192), script) as made:
        yield made


def _run(codex: CodexInstall, rig: AgentRig, tmp_path: Path, *agent_args: str) -> CodexRun:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("count=1\n")
    binding = CodexBinding(rig.base_url, rig.served, 8192, stream_idle_timeout_ms=60_000)
    return CodexRun(codex, binding, rig.token, home=tmp_path / "home", workdir=work, prompt="set count=2", agent_args=agent_args)


def test_two_tool_round_trips_change_the_file(codex: CodexInstall, rig: AgentRig, tmp_path: Path) -> None:
    out = _run(codex, rig, tmp_path).run(timeout_s=300)
    assert out.completed, out.errors or out.stderr_tail
    assert (tmp_path / "work" / "notes.txt").read_text() == "count=2\n"
    bodies = [body for body, _ in rig.captures()]
    assert len(bodies) == 3 and all(b["store"] is False and "previous_response_id" not in b for b in bodies)
    assert rig.token not in (tmp_path / "home" / "config.toml").read_text()


def test_agent_args_overriding_the_endpoint_never_start_codex(codex: CodexInstall, rig: AgentRig, tmp_path: Path) -> None:
    with pytest.raises(HitchError) as err:
        _run(codex, rig, tmp_path, "-c", "model_providers.hitch_local.base_url='http://elsewhere/v1'")
    assert err.value.code == "harness_args_conflict"
    assert rig.engine_requests() == [] and not (tmp_path / "home").exists()
