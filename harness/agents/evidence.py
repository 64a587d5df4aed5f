"""The harness's part of one ``hitch run``'s evidence under ``<root>/runs/<run-id>/inference/`` (spec §12.1).

Owns :func:`write_harness_evidence`: the harness's compatibility profile key (and field table) and the
harness result, each written atomically, for every way a run ends (an error is part of the result). The
execution record, the attempt rows, the lock and the manifests are the daemon's
(:mod:`harness.daemon.run_evidence`). Nothing here holds a token.

Also :func:`write_harness_input` / :func:`read_harness_input`: what the harness was asked (the prompt, the
output budget, Codex's extra arguments and working directory), ``runs/<id>/harness-input.json`` (0600, outside
the sealed evidence set and never bundled: a prompt may be private), so ``hitch run rerun`` asks it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.contracts.agent_profile import FieldRuleV1, HarnessKeyV1
from harness.errors import HitchError
from harness.ids import digest_json
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir

__all__ = ["HARNESS_INPUT", "read_harness_input", "run_inference_dir", "write_harness_evidence", "write_harness_input"]

HARNESS_INPUT = "harness-input.json"
_INPUT_KEYS = ("harness", "prompt", "max_output_tokens", "agent_args", "workdir")


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


def write_harness_input(root: HitchRoot, run_id: str, harness_input: dict[str, Any]) -> Path:
    """``runs/<id>/harness-input.json`` (0600): what the harness is asked (see the module docstring)."""
    path = ensure_private_dir(root.runs / run_id) / HARNESS_INPUT
    atomic_write_json(path, {k: harness_input.get(k) for k in _INPUT_KEYS}, mode=0o600)
    return path


def read_harness_input(root: HitchRoot, run_id: str) -> dict[str, Any]:
    """What :func:`write_harness_input` kept; ``run_not_rerunnable`` when the run kept nothing (a ``hitch local
    serve`` run, a run made before inputs were kept, or one whose daemon refused it before its harness ran)."""
    path = root.runs / run_id / HARNESS_INPUT
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HitchError(
            "run_not_rerunnable", f"run {run_id} kept no harness input (its harness never ran)", {"run_id": run_id}
        ) from None
    except (OSError, ValueError) as exc:
        raise HitchError("run_not_rerunnable", f"{path} is not readable JSON", {"run_id": run_id}) from exc
    if not isinstance(data, dict) or not isinstance(data.get("prompt"), str) or not isinstance(data.get("harness"), str):
        raise HitchError("run_not_rerunnable", f"{path} names no harness and prompt", {"run_id": run_id})
    return data
