"""Sealed run evidence, ``hitch run verify`` and ``hitch run compare`` (issue 30 items 1 and 3).

Three real runs (daemon, gateway, fake engine) give three sealed sets: the first started the service (cold),
the two others reused it (warm). Verify re-hashes them and names exactly the file a test changed; compare
answers under the strict conditions. Variants of a real run (other attempt rows) are made by copying its
folder, changing one file and sealing the copy again with the same function the daemon uses
(:func:`harness.run_ref.seal_ref`): a real sealed set with the one difference wanted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gateway.capture_segments import read_captures
from harness.compare.decide import MIN_SAMPLES
from harness.compare.figures import DIFFERS_EXIT_CODE, INCONCLUSIVE_EXIT_CODE
from harness.contracts.evidence import InferenceExecutionEvidenceV1
from harness.contracts.lock import InferenceLockV1
from harness.contracts.run import RunRecordV1
from harness.contracts.run_ref import REF_FILE_NAMES, InferenceRefV1
from harness.ids import digest_bytes, digest_json
from harness.paths import HitchRoot
from harness.run_ref import REF_FILE, seal_ref
from tests.harness.daemon.conftest import FAST, as_json, hitch, inputs, leak_guard, stop_quietly
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration
__all__ = ["inputs", "leak_guard"]


def _run(root: HitchRoot, run_id: str) -> dict[str, Any]:
    return as_json(
        hitch(root, "run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake",
              "--prompt", "hello", "--max-output-tokens", "8", "--run-id", run_id, "--capture", "full", "--json")
    )  # fmt: skip


def _error(proc: Any, exit_code: int) -> dict[str, Any]:
    assert proc.returncode == exit_code, proc.stdout + proc.stderr
    error: dict[str, Any] = json.loads(proc.stdout)["error"]
    return error


def _variant(root: HitchRoot, source: str, new: str, change: Any) -> None:
    """Copy run ``source`` to ``new``, let ``change(run_dir)`` alter it, and seal the copy as the daemon does."""
    src, dst = root.runs / source, root.runs / new
    shutil.copytree(src, dst)
    change(dst)
    (dst / REF_FILE).unlink()
    lock = InferenceLockV1.model_validate_json((dst / "inference" / "lock.json").read_bytes())
    _, digest = seal_ref(dst, new, lock)
    record = json.loads((dst / "run.json").read_text())
    (dst / "run.json").write_text(json.dumps({**record, "run_id": new, "ref_digest": digest}))


def _rows(e2e_ms: list[float]) -> Any:
    def change(run_dir: Path) -> None:
        path = run_dir / "inference" / "attempts.jsonl"
        row = json.loads(path.read_text().splitlines()[0])
        path.write_text("".join(json.dumps({**row, "request_id": f"req-{i}", "e2e_ms": v}) + "\n" for i, v in enumerate(e2e_ms)))

    return change


def _evaluation(root: HitchRoot, evaluation_id: str, trials: list[tuple[str, float]]) -> None:
    """An evaluation record whose trials were these runs (as ``hitch eval harbor`` writes one)."""
    execution = json.loads((root.runs / trials[0][0] / "inference" / "execution.json").read_text())
    record = {
        "schema_version": "1", "evaluation_id": evaluation_id, "tool": "harbor", "tool_version": "0.25.0",
        "agent": "terminus-2", "model_connection": "host", "environment": "docker",
        "inference_id": execution["inference_id"], "engine": "fake", "started_at": 1.0, "finished_at": 2.0,
        "trials": [{"trial": f"{evaluation_id}-task-{i}", "task": "task", "run_id": run_id, "binding_id": None,
                    "status": "completed", "reward": reward, "usage": None, "service": None, "timing": None}
                   for i, (run_id, reward) in enumerate(trials)],
    }  # fmt: skip
    path = root.path / "evals" / evaluation_id / "evaluation.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))


def test_runs_are_sealed_verified_and_compared_under_the_strict_conditions(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    for run_id in ("ra", "rb", "rc"):
        _run(root, run_id)
    stop_quietly(root)

    # the sealed set: every file by digest, the ref's own digest in run.json, the lock digest the evidence's
    record = RunRecordV1.model_validate_json((root.runs / "ra" / "run.json").read_bytes())
    ref_bytes = (root.runs / "ra" / REF_FILE).read_bytes()
    assert record.ref_digest == digest_bytes(ref_bytes)
    ref = InferenceRefV1.model_validate_json(ref_bytes)
    execution = InferenceExecutionEvidenceV1.model_validate_json((root.runs / "ra" / "inference" / "execution.json").read_bytes())
    assert tuple(f.name for f in ref.files) == REF_FILE_NAMES and ref.lock_digest == execution.lock_digest
    assert ref.inference_id == execution.inference_id == record.inference_id
    index = json.loads((root.runs / "ra" / "inference" / "capture-index.json").read_text())
    assert index["mode"] == "full" and {Path(f["path"]).name for f in index["files"]} == {"index.jsonl", "segment-00000.bin"}
    # the model identity: the lock's, resolved by the daemon; the wire alias is only that
    identity = execution.model_identity
    assert identity is not None and identity.identity_resolved and identity.provider == "local"
    assert identity.requested_id == "local/tiny" and identity.effective_id == execution.model_id
    lock = InferenceLockV1.model_validate_json((root.runs / "ra" / "inference" / "lock.json").read_bytes())
    assert identity.parameters_sha256 == digest_json(lock.generation.to_json_dict())
    assert identity.wire_model == execution.binding.wire_model

    # the engine's own figures of the request, joined by its request id (seed 004), agree with the gateway's row
    joined = execution.engine_requests
    assert joined is not None and (joined.joined, joined.unmatched) == (1, 0)
    [row] = [json.loads(x) for x in (root.runs / "ra" / "inference" / "attempts.jsonl").read_text().splitlines()]
    [engine] = [json.loads(x) for x in (root.runs / "ra" / "inference" / "engine-requests.jsonl").read_text().splitlines()]
    assert engine["joined"] and engine["request_id"] == row["request_id"] and engine["engine_rid"] == row["engine_rid"]
    figures = engine["engine"]
    assert (figures["prompt_tokens"], figures["completion_tokens"]) == (row["input_tokens"], row["output_tokens"])
    assert {"e2e_latency", "first_token_latency", "request_received_ts"} <= set(figures) and figures["finish"] == "length"

    ok = as_json(hitch(root, "run", "verify", "ra", "--json"))
    assert ok["ok"] and ok["ref_digest"] == record.ref_digest and len(ok["checked"]) == len(REF_FILE_NAMES) + 1 + 2

    # compare: comparable, but one request a side decides nothing: inconclusive, its own exit code, and what would
    # decide it (how many samples a side)
    one = as_json(hitch(root, "run", "compare", "rb", "rc", "--json"), INCONCLUSIVE_EXIT_CODE)
    assert one["comparable"] and not one["differs"] and {c["name"] for c in one["conditions"]} == {
        "model_id", "inference_id", "hardware", "cache_condition"
    }  # fmt: skip
    assert one["verdict"] == "inconclusive" and one["figures"] and {f["verdict"] for f in one["figures"]} == {"inconclusive"}
    assert one["inconclusive"] == [f["name"] for f in one["figures"]] and len(one["to_decide"]) == len(one["figures"])
    assert all(f["decision"]["samples_needed"] >= MIN_SAMPLES for f in one["figures"])
    assert one["rule"]["correction"] == "holm" and one["rule"]["alpha"] == 0.05
    human = hitch(root, "run", "compare", "rb", "rc")
    assert human.returncode == INCONCLUSIVE_EXIT_CODE and "INCONCLUSIVE" in human.stdout and "samples a side" in human.stdout
    # a run compared with itself is refused
    assert _error(hitch(root, "run", "compare", "rb", "rb", "--json"), 2)["code"] == "comparison_with_itself"

    # twelve requests a side, one side 50 ms slower: e2e_ms differs beyond its margin, exit DIFFERS_EXIT_CODE
    _variant(root, "ra", "fast", _rows([50.0 + (i % 4) for i in range(12)]))
    _variant(root, "ra", "slow", _rows([100.0 + (i % 4) for i in range(12)]))
    _variant(root, "ra", "fast2", _rows([50.5 + (i % 4) for i in range(12)]))
    differs = as_json(hitch(root, "run", "compare", "fast", "slow", "--json"), DIFFERS_EXIT_CODE)
    assert differs["verdict"] == "differs" and differs["differences"] == ["e2e_ms"]
    e2e = next(f for f in differs["figures"] if f["name"] == "e2e_ms")
    assert e2e["difference"]["low"] > 40 and e2e["a"]["n"] == e2e["b"]["n"] == 12
    same = as_json(hitch(root, "run", "compare", "fast", "fast2", "--json"))  # half a ms apart: within 5 %
    assert same["verdict"] == "reproduced" and {f["verdict"] for f in same["figures"]} == {"same"}

    # a condition that differs (ra started the service, rb reused it): refused before any figure, naming it
    err = _error(hitch(root, "run", "compare", "ra", "rb", "--json"), 4)
    assert err["code"] == "runs_not_comparable" and [c["name"] for c in err["details"]["differ"]] == ["cache_condition"]
    assert "cache_condition" in err["message"]

    # evaluations of those runs: compared under the same conditions, the share solved with Wilson intervals
    _evaluation(root, "ev-a", [("rb", 1.0)])
    _evaluation(root, "ev-b", [("rc", 0.0)])
    _evaluation(root, "ev-cold", [("ra", 1.0)])
    evals = as_json(hitch(root, "eval", "compare", "ev-a", "ev-b", "--json"), INCONCLUSIVE_EXIT_CODE)
    solved = next(f for f in evals["figures"] if f["name"] == "trials_solved")
    assert solved["method"] == "agresti-caffo" and (solved["a"]["successes"], solved["b"]["successes"]) == (1, 0)
    assert solved["verdict"] == "inconclusive" and not evals["differs"]  # one trial a side decides nothing
    assert evals["tasks"] == [{"task": "task", "a": {"solved": 1, "trials": 1}, "b": {"solved": 0, "trials": 1}, "changed": True}]
    across = as_json(hitch(root, "eval", "compare", "ev-a", "ev-b", "--across-models", "--json"))
    assert across["mode"] == "models" and "verdict" not in across and across["tasks"][0]["changed"] is True
    assert _error(hitch(root, "eval", "compare", "ev-a", "ev-a", "--json"), 2)["code"] == "comparison_with_itself"
    err = _error(hitch(root, "eval", "compare", "ev-cold", "ev-b", "--json"), 4)
    assert err["code"] == "runs_not_comparable" and [c["name"] for c in err["details"]["differ"]] == ["cache_condition"]
    assert _error(hitch(root, "eval", "compare", "ev-a", "nope", "--json"), 2)["code"] == "evaluation_not_found"

    # tampering: verify names the file and compare refuses the run
    attempts = root.runs / "rb" / "inference" / "attempts.jsonl"
    attempts.write_text(attempts.read_text().replace('"status":"', '"status": "', 1))
    bad = _error(hitch(root, "run", "verify", "rb", "--json"), 3)
    assert bad["code"] == "run_evidence_changed"
    assert [(c["path"], c["what"]) for c in bad["details"]["changes"]] == [("inference/attempts.jsonl", "changed")]
    assert _error(hitch(root, "run", "compare", "rc", "rb", "--json"), 3)["code"] == "run_evidence_changed"
    (root.runs / "ra" / "inference" / "execution.json").unlink()
    gone = _error(hitch(root, "run", "verify", "ra", "--json"), 3)["details"]["changes"]
    assert [(c["path"], c["what"]) for c in gone] == [("inference/execution.json", "missing")]
    ref_file = root.runs / "fast" / REF_FILE
    ref_file.write_bytes(ref_file.read_bytes().replace(b'"run_id":"fast"', b'"run_id":"other"'))
    assert [c["path"] for c in _error(hitch(root, "run", "verify", "fast", "--json"), 3)["details"]["changes"]] == [REF_FILE]
    assert _error(hitch(root, "run", "verify", "nope", "--json"), 2)["code"] == "run_not_found"


def test_the_engine_naming_another_model_never_changes_the_verified_identity(inputs: ServiceInputs) -> None:
    """Spec §6.3: ``response.model`` is a wire alias. The fake engine answers naming another model; the run's
    identity is still the lock's model, resolved by the daemon, and the engine's word appears only in its bytes."""
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    out = as_json(
        hitch(root, "run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake",
              "--prompt", "hello", "--max-output-tokens", "8", "--run-id", "impostor", "--capture", "full",
              "--fake-fault", "response_model:name=impostor-model", "--json")
    )  # fmt: skip
    stop_quietly(root)
    assert out["record"]["status"] == "completed"
    run_dir = root.runs / "impostor"
    responses = [r for folder in (run_dir / "inference" / "capture").iterdir() for _, _, r in read_captures(folder)]
    assert responses and all(b'"model":"impostor-model"' in r for r in responses)  # what the engine said
    execution = InferenceExecutionEvidenceV1.model_validate_json((run_dir / "inference" / "execution.json").read_bytes())
    identity = execution.model_identity
    assert identity is not None and identity.identity_resolved
    assert identity.effective_id == execution.model_id == inputs.lock.model_id
    assert identity.wire_model == execution.binding.wire_model != "impostor-model"
    assert "impostor-model" not in json.dumps(identity.to_json_dict()) + json.dumps(execution.binding.to_json_dict())
    # a record whose identity is not the lock's does not even parse
    forged = {**execution.to_json_dict(), "model_identity": {**identity.to_json_dict(), "effective_id": "sha256:" + "0" * 64}}
    with pytest.raises(ValueError, match="model identity is the lock's"):
        InferenceExecutionEvidenceV1.model_validate(forged)


def _second_model(root: HitchRoot, model_dir: Path, into: Path) -> None:
    """Another checkpoint with the tiny one's shape (one byte of its generation config differs: another model_id,
    the same derived lock sizes), imported as ``local/tiny2``."""
    shutil.copytree(model_dir, into, symlinks=False)
    config = into / "generation_config.json"
    config.chmod(0o644)
    config.write_text(config.read_text() + " ")
    as_json(hitch(root, "models", "add", str(into), "--name", "tiny2", "--json"))


def _hardware(run_dir: Path) -> None:
    path = run_dir / "inference" / "execution.json"
    execution = json.loads(path.read_text())
    execution["hardware"]["cpu"]["model_name"] = "another CPU"
    path.write_text(json.dumps(execution))


def test_two_models_are_compared_across_models_and_any_other_difference_is_refused(inputs: ServiceInputs, tmp_path: Path) -> None:
    root = inputs.root
    _second_model(root, inputs.model_dir, tmp_path / "tiny2")
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    _run(root, "m1")
    as_json(
        hitch(root, "run", "--harness", "model-call", "--model", "local/tiny2", "--device", "cpu", "--engine", "fake",
              "--prompt", "hello", "--max-output-tokens", "8", "--run-id", "m2", "--json")
    )  # fmt: skip
    as_json(
        hitch(root, "run", "--harness", "model-call", "--model", "local/tiny2", "--device", "cpu", "--engine", "fake",
              "--profile", "throughput", "--prompt", "hello", "--max-output-tokens", "8", "--run-id", "m3", "--json")
    )  # fmt: skip
    stop_quietly(root)

    # the strict comparison refuses another model; the model comparison answers, with no verdict
    assert _error(hitch(root, "run", "compare", "m1", "m2", "--json"), 4)["code"] == "runs_not_comparable"
    models = as_json(hitch(root, "run", "compare", "m1", "m2", "--across-models", "--json"))
    assert models["mode"] == "models" and "verdict" not in models and "differs" not in models
    assert {c["name"] for c in models["conditions"]} == {
        "runtime_id", "profile", "sampling", "serving_config", "protocol", "hardware", "cache_condition"
    } and all(c["same"] for c in models["conditions"])  # fmt: skip
    e2e = next(f for f in models["figures"] if f["name"] == "e2e_ms")
    assert e2e["decision"] is None and e2e["verdict"] is None and set(e2e["difference"]) >= {"estimate", "low", "high"}
    assert any(n.startswith("models: ") for n in models["notes"])
    human = hitch(root, "run", "compare", "m1", "m2", "--across-models")
    assert human.returncode == 0 and "a model comparison" in human.stdout and "REPRODUCED" not in human.stdout

    # another serving configuration (the throughput profile), or another machine: refused, naming it
    err = _error(hitch(root, "run", "compare", "m1", "m3", "--across-models", "--json"), 4)
    assert err["code"] == "runs_not_comparable" and err["details"]["across_models"]
    assert {"profile", "serving_config"} <= {c["name"] for c in err["details"]["differ"]} and "profile" in err["message"]
    _variant(root, "m2", "m2-elsewhere", _hardware)
    err = _error(hitch(root, "run", "compare", "m1", "m2-elsewhere", "--across-models", "--json"), 4)
    assert [c["name"] for c in err["details"]["differ"]] == ["hardware"]
