"""The harness's part of one ``hitch run``'s evidence under ``<root>/runs/<run-id>/inference/`` (spec §12.1).

Owns :func:`write_harness_evidence`: the harness's compatibility profile key (and field table) and the
harness result, each written atomically, for every way a run ends (an error is part of the result). The
execution record, the attempt rows, the lock and the manifests are the daemon's
(:mod:`harness.daemon.run_evidence`). Nothing here holds a token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.contracts.agent_profile import FieldRuleV1, HarnessKeyV1
from harness.ids import digest_json
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir

__all__ = ["run_inference_dir", "write_harness_evidence"]


def run_inference_dir(root: HitchRoot, run_id: str) -> Path:
    return root.run_inference_dir(run_id)


def write_harness_evidence(
    root: HitchRoot, run_id: str, key: HarnessKeyV1 | None, fields: tuple[FieldRuleV1, ...], outcome: dict[str, Any]
) -> Path:
    """``harness.json`` (when the harness got as far as its key) and ``result.json``; returns the folder."""
    out = ensure_private_dir(run_inference_dir(root, run_id))
    if key is not None:
        atomic_write_json(
            out / "harness.json",
            {
                "key": key.to_json_dict(),
                "profile_id": digest_json(key.to_json_dict()),
                "fields": [f.to_json_dict() for f in fields],
            },
        )
    atomic_write_json(out / "result.json", outcome)
    return out
