"""``hitch bundle export|verify`` of runs and evaluations (issue 30 item 4), from a real sealed run.

One real run (daemon, gateway, fake engine); an evaluation record naming it as its trial. Bundles of both verify
offline; a bundle with one member's bytes changed, one whose manifest was rewritten to match (the run's sealed
ref still catches it), one with a member added, a run that is not sealed, and a run whose harness result leaked a
key of the root are each refused with their code, and nothing half written is left.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from harness.contracts.evaluation import EvaluationPlanV1, TrialSlotV1
from harness.paths import HitchRoot
from tests.harness.bundle_support import members_of, rewrite
from tests.harness.daemon.conftest import FAST, as_json, hitch, inputs, leak_guard, stop_quietly
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration
__all__ = ["inputs", "leak_guard"]


def _error(proc: Any, exit_code: int) -> dict[str, Any]:
    assert proc.returncode == exit_code, proc.stdout + proc.stderr
    error: dict[str, Any] = json.loads(proc.stdout)["error"]
    return error


def _evaluation(root: HitchRoot, run_id: str) -> None:
    execution = json.loads((root.runs / run_id / "inference" / "execution.json").read_text())
    record = {
        "schema_version": "1", "evaluation_id": "ev-1", "tool": "harbor", "tool_version": "0.25.0", "agent": "terminus-2",
        "model_connection": "host", "environment": "docker", "inference_id": execution["inference_id"], "engine": "fake",
        "started_at": 1.0, "finished_at": 2.0,
        "trials": [{
            "trial": "ev-1-task-0", "task": "task", "run_id": run_id, "binding_id": execution["binding"]["binding_id"],
            "status": "completed", "reward": 1.0, "usage": None, "service": None, "timing": None,
        }],
    }  # fmt: skip
    path = root.path / "evals" / "ev-1" / "evaluation.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    plan = EvaluationPlanV1(
        evaluation_id="ev-1", agent="terminus-2", environment="docker", k=1, n_concurrent=1, agent_kwargs={}, agent_paths=[],
        agent_timeout_s=None, infra_retries=1, agent_profile_id=None, eval_image=None, run_body={"engine": "fake"},
        inference_id=execution["inference_id"],
        slots=[TrialSlotV1(slot=0, task="/tasks/task", attempt=0)], created_at=1.0,
    )  # fmt: skip
    (path.parent / "plan.json").write_text(json.dumps(plan.to_json_dict()))


def test_run_and_evaluation_bundles_verify_offline_and_refuse_tampering(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    as_json(
        hitch(root, "run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake",
              "--prompt", "hello", "--max-output-tokens", "8", "--run-id", "ra", "--capture", "full", "--json")
    )  # fmt: skip
    stop_quietly(root)

    out = tmp_path / "ra.tar"
    exported = as_json(hitch(root, "bundle", "export", "ra", "--out", str(out), "--json"))
    names = [f["path"] for f in exported["manifest"]["files"]]
    assert "runs/ra/inference.ref.json" in names and "runs/ra/inference/capture-index.json" in names
    # never the payloads, a Codex home or anything of the store: only the run's evidence
    assert not [n for n in names if "/capture/" in n or "codex-home" in n or not n.startswith("runs/ra/")]
    assert exported["manifest"]["model_id"] == inputs.lock.model_id
    with tarfile.open(out) as tar:
        infos = tar.getmembers()
    assert infos[0].name == "bundle.json" and {i.mtime for i in infos} == {0} and all(i.isreg() for i in infos)
    ok = as_json(hitch(root, "bundle", "verify", str(out), "--json"))
    assert ok["verified"] and ok["bundle_kind"] == "run" and ok["runs_checked"] == ["ra"] and ok["files"] == len(names)

    # one member's bytes changed: named
    bad = tmp_path / "bad.tar"
    bad.write_bytes(out.read_bytes())
    rewrite(bad, lambda m: m.__setitem__("runs/ra/inference/attempts.jsonl", m["runs/ra/inference/attempts.jsonl"] + b"\n"))
    err = _error(hitch(root, "bundle", "verify", str(bad), "--json"), 3)
    assert err["code"] == "bundle_invalid" and err["details"]["member"] == "runs/ra/inference/attempts.jsonl"
    # the manifest rewritten to match: the run's sealed ref still names the original bytes
    rewrite(bad, lambda m: None, fix_manifest=True)
    err = _error(hitch(root, "bundle", "verify", str(bad), "--json"), 3)
    assert err["details"]["member"] == "runs/ra/inference/attempts.jsonl" and "sealed ref" in err["message"]
    # a member the manifest does not list
    extra = tmp_path / "extra.tar"
    extra.write_bytes(out.read_bytes())
    rewrite(extra, lambda m: m.__setitem__("runs/ra/inference/capture/x.response.bin", b"payload"))
    assert _error(hitch(root, "bundle", "verify", str(extra), "--json"), 3)["details"]["extra"] == [
        "runs/ra/inference/capture/x.response.bin"
    ]

    # an evaluation: its record and its trials' runs
    _evaluation(root, "ra")
    ev_out = tmp_path / "ev.tar"
    as_json(hitch(root, "bundle", "export", "ev-1", "--out", str(ev_out), "--json"))
    assert set(members_of(ev_out)) == {"bundle.json", "evals/ev-1/evaluation.json", "evals/ev-1/plan.json", *names}
    ev_ok = as_json(hitch(root, "bundle", "verify", str(ev_out), "--json"))
    assert ev_ok["bundle_kind"] == "evaluation" and ev_ok["runs_checked"] == ["ra"]

    # refusals at export: nothing is written
    refused = tmp_path / "refused.tar"
    assert _error(hitch(root, "bundle", "export", "nope", "--out", str(refused), "--json"), 2)["code"] == "usage_error"
    record = json.loads((root.runs / "ra" / "run.json").read_text())
    (root.runs / "unsealed").mkdir()
    (root.runs / "unsealed" / "run.json").write_text(json.dumps({**record, "run_id": "unsealed", "ref_digest": None}))
    assert (
        _error(hitch(root, "bundle", "export", "unsealed", "--out", str(refused), "--json"), 3)["code"] == "run_evidence_changed"
    )
    key = next(p for p in root.private.rglob("*api-key")).read_text().strip()
    result = root.runs / "ra" / "inference" / "result.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), "text": f"the key is {key}"}))
    leak = _error(hitch(root, "bundle", "export", "ra", "--out", str(refused), "--json"), 3)
    assert leak["code"] == "bundle_contains_secret" and leak["details"]["member"] == "runs/ra/inference/result.json"
    assert key not in json.dumps(leak) and not refused.exists()
