"""A Codex turn counts as answered only when Codex completed it with a non-empty agent message.

``CodexOutcome.turn_problem`` on the event shapes ``codex exec --json`` writes (hermetic), and on real Codex
runs through a real gateway to the fake engine's scripted answers: an empty answer, and a turn the engine cut
at the lock's budget (``response.incomplete``, which Codex reports as a failed turn). Codex runs need the
pinned binary (``make codex``): skipped without it unless ``HITCH_REQUIRE_CODEX`` is set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from certify.kit.agents import AgentRig
from harness.agents.codex_home import CodexBinding
from harness.agents.codex_install import CodexInstall
from harness.agents.codex_runner import CodexOutcome, CodexRun
from tests.gateway.support import make_lock

_STARTED = {"type": "turn.started"}
_DONE = {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}}


def _message(text: str) -> dict[str, Any]:
    return {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": text}}


@pytest.mark.parametrize(
    ("events", "returncode", "problem"),
    [
        ([_STARTED, _message("Hello."), _DONE], 0, None),
        ([_STARTED, _message(""), _DONE], 0, "the turn completed with an empty answer (no agent message text)"),
        ([_STARTED, _message(" \n"), _DONE], 0, "the turn completed with an empty answer (no agent message text)"),
        ([_STARTED, _DONE], 0, "the turn completed with an empty answer (no agent message text)"),
        (
            [_STARTED, {"type": "turn.failed", "error": {"message": "stream disconnected before completion"}}],
            1,
            "Codex reported a failed turn: stream disconnected before completion",
        ),
        (
            [_STARTED, {"type": "error", "message": "unexpected status 400"}, _message("Hi"), _DONE],
            0,
            "Codex reported a failed turn: unexpected status 400",
        ),
        ([_STARTED, _message("Hello."), _DONE], 2, "codex exited with 2"),
        ([_STARTED, _message("Hello.")], 0, "no turn.completed event"),
    ],
    ids=["answered", "empty", "blank", "no-message", "failed-turn", "error-event", "exit-code", "no-completion"],
)
def test_turn_problem_names_what_went_wrong(events: list[dict[str, Any]], returncode: int, problem: str | None) -> None:
    outcome = CodexOutcome(returncode=returncode, events=events, cancelled=False)
    assert outcome.turn_problem() == problem


def _turn(codex: CodexInstall, tmp_path: Path, tiny_model: Path, script: list[dict[str, Any]]) -> CodexOutcome:
    with AgentRig(tmp_path / "rig", tiny_model, make_lock(context=8192), script) as rig:
        work = tmp_path / "work"
        work.mkdir()
        binding = CodexBinding(rig.base_url, rig.served, 8192, stream_idle_timeout_ms=120_000)
        run = CodexRun(codex, binding, rig.token, home=tmp_path / "home", workdir=work, prompt="Say hello in one word.")
        return run.run(timeout_s=300)


@pytest.mark.integration
def test_a_scripted_answer_is_a_turn_without_problem(codex: CodexInstall, tmp_path: Path, tiny_model: Path) -> None:
    out = _turn(codex, tmp_path, tiny_model, [{"text": "Hello."}])
    assert out.turn_problem() is None and out.final_message == "Hello."


@pytest.mark.integration
def test_an_empty_answer_is_a_turn_problem(codex: CodexInstall, tmp_path: Path, tiny_model: Path) -> None:
    out = _turn(codex, tmp_path, tiny_model, [{"text": ""}])
    assert out.completed  # Codex itself calls the turn completed: only the check sees that nothing was said
    assert out.turn_problem() == "the turn completed with an empty answer (no agent message text)"


@pytest.mark.integration
def test_a_turn_cut_at_the_budget_is_a_failed_turn(codex: CodexInstall, tmp_path: Path, tiny_model: Path) -> None:
    out = _turn(codex, tmp_path, tiny_model, [])  # unscripted: the fake's text runs to the lock's budget
    problem = out.turn_problem()
    assert problem is not None and problem.startswith("Codex reported a failed turn: Incomplete response returned"), problem
