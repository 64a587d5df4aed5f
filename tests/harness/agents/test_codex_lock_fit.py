"""Codex on a lock that claims no parallel tool calls (issue 28 item 4): Codex always sends
``parallel_tool_calls: true`` and the gateway refuses any value other than the lock's, so ``hitch run --harness
codex`` refuses such a lock before anything starts, never mid-run. Real CLI; no daemon, no engine is started."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.errors import HitchError
from tests.components import missing
from tests.harness.daemon.conftest import as_json, hitch, inputs, leak_guard
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration
__all__ = ["inputs", "leak_guard"]


def test_codex_is_refused_before_any_service_on_a_lock_without_parallel_tool_calls(inputs: ServiceInputs) -> None:
    from harness.agents.codex_install import find_codex

    try:
        find_codex()
    except HitchError as err:
        missing("codex", err.message)
    root = inputs.root
    single = root.path.parent / "no-parser-checkpoint"
    shutil.copytree(inputs.model_dir, single)
    added = as_json(hitch(root, "models", "add", str(single), "--name", "single", "--tool-call-parser", "none", "--json"))
    assert added["model_id"]
    proc = hitch(root, "run", "--harness", "codex", "--model", "local/single", "--engine", "fake", "--prompt", "x", "--json")
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "inference_harness_unsupported"
    assert (err["details"]["field"], err["details"]["sends"]) == ("parallel_tool_calls", True)
    assert not root.runs.exists() or list(root.runs.iterdir()) == []  # no run was even admitted
    assert as_json(hitch(root, "daemon", "status", "--json"))["running"] is False
