"""What makes two run submissions the same request (seed 002: idempotency keys).

A run id is an idempotency key. :func:`run_identity` reduces a submission (the ``POST /v1/runs`` body, as
``hitch run``, ``hitch local serve`` and ``hitch eval harbor`` send it) to its identity-relevant fields —
harness, the lock (a pinned ``inference_id``, or its inputs: the model's ``model_id`` — never the alias,
which may be re-pointed — device, profile, runtime), the engine choice, capture mode and bound, the trial
reservation, and the harness's own ``submission`` (``hitch run``: the prompt's digest, the output budget,
agent arguments, the working directory) — with the daemon's defaults filled in, so an omitted field and its
default are the same request. Each field is hashed on its own (only hashes are kept: a prompt or an agent
argument never lands in ``run.json``) and the digest is taken over those hashes.

:func:`require_same_request` is the rule: the same run id with the same digest answers the kept record;
with another digest (or against a record written before digests existed) it is ``run_conflict``, naming
the fields that differ, and nothing runs.
"""

from __future__ import annotations

from typing import Any

from harness.contracts.run import RunIdentityV1, RunRecordV1
from harness.errors import HitchError
from harness.ids import digest_json
from harness.paths import HitchRoot
from harness.store import resolve_model_id

__all__ = ["require_same_request", "run_identity"]


def _lock_inputs(root: HitchRoot, body: dict[str, Any]) -> Any:
    inference_id = body.get("inference_id")
    if isinstance(inference_id, str) and inference_id:
        return {"inference_id": inference_id}
    model = body.get("model")
    model_id = resolve_model_id(root, model) if isinstance(model, str) and model else None
    return {
        "model_id": model_id,
        "device": body.get("device", "cpu"),
        "profile": body.get("profile", "baseline"),
        "runtime": body.get("runtime"),
    }


def run_identity(root: HitchRoot, body: dict[str, Any]) -> RunIdentityV1:
    """The identity of one submission; the defaults are the daemon's (``harness.daemon.runs``)."""
    values: dict[str, Any] = {
        "harness": body.get("harness"),
        "lock": _lock_inputs(root, body),
        "engine": body.get("engine", "sglang"),
        "launcher": body.get("launcher", "process"),
        "image": body.get("image"),
        "fake_flags": body.get("fake_flags") or [],
        "capture": body.get("capture", "metadata"),
        "capture_max_bytes": body.get("capture_max_bytes"),
        "for_containers": body.get("for_containers", False),
        "eval_image": body.get("eval_image"),
        "trial": body.get("trial"),
        "submission": body.get("submission"),
    }
    fields = {name: digest_json(value) for name, value in values.items()}
    return RunIdentityV1(digest=digest_json(fields), fields=fields)


def require_same_request(run_id: str, kept: RunRecordV1, identity: RunIdentityV1) -> None:
    """Return when ``identity`` is the request ``kept`` was admitted for; else ``run_conflict``."""
    if kept.identity is not None and kept.identity.digest == identity.digest:
        return
    details: dict[str, Any] = {"run_id": run_id, "status": kept.status}
    if kept.identity is None:
        message = f"run {run_id!r} was recorded without a request digest: it cannot be shown to be this request"
    else:
        old, new = kept.identity.fields, identity.fields
        differs = sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))
        details["differs"] = differs
        message = f"run {run_id!r} was submitted with another request (it differs in: {', '.join(differs)})"
    raise HitchError("run_conflict", message, details)
