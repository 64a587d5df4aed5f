"""Evidence of one ``hitch run`` under ``<root>/runs/<run-id>/inference/`` (spec §12.1).

Owns :func:`write_run_evidence`: the sealed lock, the model and runtime manifests, the harness's
compatibility profile key (and field table), the execution evidence record and the harness result, each
as its own JSON file written atomically. Nothing here holds a token: the token file stays where the daemon
wrote it (0600) and only the binding's public facts are recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contracts.evidence import HardwareFingerprintV1, InferenceExecutionEvidenceV1
from harness.contracts.harness_profile import FieldRuleV1, HarnessKeyV1
from harness.contracts.lock import InferenceLockV1
from harness.contracts.model import LocalModelManifestV1
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.ids import digest_json
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir

__all__ = ["RunFacts", "run_inference_dir", "write_run_evidence"]


@dataclass(frozen=True)
class RunFacts:
    run_id: str
    service_id: str
    epoch: int
    binding_id: str
    base_url: str
    wire_model: str
    device: str
    requests: int
    complete: bool
    reused_service: bool


def run_inference_dir(root: HitchRoot, run_id: str) -> Path:
    return root.runs / run_id / "inference"


def write_run_evidence(
    root: HitchRoot,
    facts: RunFacts,
    lock: InferenceLockV1,
    model: LocalModelManifestV1,
    runtime: InferenceRuntimeManifestV1,
    key: HarnessKeyV1,
    fields: tuple[FieldRuleV1, ...],
    outcome: dict[str, Any],
) -> Path:
    """Write every evidence file of the run; returns the run's ``inference/`` directory."""
    out = run_inference_dir(root, facts.run_id)
    ensure_private_dir(out)
    atomic_write_json(out / "lock.json", lock.to_json_dict())
    atomic_write_json(out / "model.json", model.to_json_dict())
    atomic_write_json(out / "runtime.json", runtime.to_json_dict())
    device = "cuda" if facts.device == "cuda" else "cpu"
    execution = InferenceExecutionEvidenceV1(
        run_id=facts.run_id,
        inference_id=lock.inference_id,
        lock_digest=digest_json(lock.to_json_dict()),
        service_id=facts.service_id,
        epoch=facts.epoch,
        hardware=HardwareFingerprintV1(device=device),
        observed={
            "binding_id": facts.binding_id,
            "base_url": facts.base_url,
            "wire_model": facts.wire_model,
            # the gateway's per-request rows of this run (written by the daemon's gateway, batched)
            "gateway_evidence": str(root.root / "inference" / "gateway" / "evidence" / f"{facts.binding_id}.requests.jsonl"),
        },
        reused_service=facts.reused_service,
        cache_condition="warm" if facts.reused_service else "cold",
        requests=facts.requests,
        complete=facts.complete,
    )
    atomic_write_json(out / "execution.json", execution.to_json_dict())
    atomic_write_json(
        out / "harness.json",
        {"key": key.to_json_dict(), "profile_id": digest_json(key.to_json_dict()), "fields": [f.to_json_dict() for f in fields]},
    )
    atomic_write_json(out / "result.json", outcome)
    return out
