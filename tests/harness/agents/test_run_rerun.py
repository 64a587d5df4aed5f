"""``hitch run rerun ID`` (issue 30 item 2): the same harness input on the same lock, as a new run; and its
refusals (real daemon, gateway and fake engine)."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from harness.contracts.run import RunRecordV1
from harness.paths import HitchRoot
from tests.harness.daemon.conftest import FAST, as_json, hitch, inputs, leak_guard, stop_quietly
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration
__all__ = ["inputs", "leak_guard"]


def _record(root: HitchRoot, run_id: str) -> RunRecordV1:
    return RunRecordV1.model_validate_json((root.runs / run_id / "run.json").read_bytes())


def _error(root: HitchRoot, *args: str) -> dict[str, Any]:
    proc = hitch(root, "run", "rerun", *args, "--json")
    assert proc.returncode != 0, proc.stdout
    error: dict[str, Any] = json.loads(proc.stdout)["error"]
    return error


def test_rerun_runs_the_same_input_on_the_same_lock_and_refuses_what_changed(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    as_json(
        hitch(root, "run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake",
              "--prompt", "say something", "--max-output-tokens", "6", "--run-id", "orig", "--capture", "full", "--json")
    )  # fmt: skip
    kept = json.loads((root.runs / "orig" / "harness-input.json").read_text())
    assert kept == {"harness": "model-call", "prompt": "say something", "max_output_tokens": 6, "agent_args": [], "workdir": None}

    again = as_json(hitch(root, "run", "rerun", "orig", "--run-id", "again", "--json"))
    assert again["kind"] == "run" and again["run_id"] == "again" and again["record"]["status"] == "completed"
    first, second = _record(root, "orig"), _record(root, "again")
    assert second.rerun_of == "orig" and second.inference_id == first.inference_id and second.capture == "full"
    assert second.request["inference_id"] == first.inference_id and second.request["engine"] == "fake"
    assert again["max_output_tokens"] == 6 and json.loads((root.runs / "again" / "harness-input.json").read_text()) == kept
    assert as_json(hitch(root, "run", "verify", "again", "--json"))["ok"]
    stop_quietly(root)

    # refusals, each before any run is created
    assert _error(root, "nope")["code"] == "run_not_found"
    (root.runs / "again" / "harness-input.json").unlink()
    assert _error(root, "again")["code"] == "run_not_rerunnable"
    attempts = root.runs / "again" / "inference" / "attempts.jsonl"
    shutil.copy(root.runs / "orig" / "harness-input.json", root.runs / "again" / "harness-input.json")
    attempts.write_bytes(attempts.read_bytes() + b"\n")
    changed = _error(root, "again")
    assert changed["code"] == "run_evidence_changed" and changed["details"]["changes"][0]["path"] == "inference/attempts.jsonl"
    lock_dir = root.digest_dir(root.sealed_locks, first.inference_id or "")
    moved = lock_dir.with_name(lock_dir.name + ".away")
    lock_dir.rename(moved)
    assert _error(root, "orig")["code"] == "inference_lock_mismatch"
    moved.rename(lock_dir)
    manifest = root.digest_dir(root.models, inputs.lock.model_id) / "manifest.json"
    manifest.rename(manifest.with_name("manifest.away"))
    gone = _error(root, "orig")
    assert gone["code"] == "local_model_not_found" and gone["details"]["model_id"] == inputs.lock.model_id
    assert sorted(p.name for p in root.runs.iterdir()) == ["again", "orig"]  # no run was created by a refusal
