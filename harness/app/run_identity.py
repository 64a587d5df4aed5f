"""What makes two run submissions the same request: a run id is an idempotency key.

:func:`run_identity` reduces a submission (the ``POST /v1/runs`` request, as ``hitch run``, ``hitch local
serve`` and ``hitch eval harbor`` send it; the CLI asks it too, before anything starts) to its
identity-relevant fields — harness, the lock (a pinned ``inference_id``, or its inputs: the model's
``model_id`` — never the alias, which may be re-pointed — device, profile, runtime, generation), the engine choice,
capture mode and bound, the trial reservation, and the harness's own ``submission`` (``hitch run``: the
prompt's digest, the output budget, agent arguments, the working directory) — with the defaults of
:class:`~harness.app.requests.RunRequest` filled in, so an omitted field and its default are the same
request. Each field is hashed on its own (only hashes are kept: a prompt or an agent argument never lands in
``run.json``) and the digest is taken over those hashes.

:func:`require_same_request` is the rule: the same run id with the same digest answers the kept record;
with another digest (or against a record written before digests existed) it is ``run_conflict``, naming
the fields that differ, and nothing runs.
"""

from __future__ import annotations

import secrets
from typing import Any

from harness.app.requests import RunRequest
from harness.contracts.run import RunIdentityV1, RunRecordV1
from harness.errors import HitchError
from harness.ids import digest_json
from harness.paths import HitchRoot
from harness.store import resolve_model_id

__all__ = ["new_run_id", "require_same_request", "run_identity"]


def _lock_inputs(root: HitchRoot, ask: RunRequest) -> Any:
    if ask.inference_id:
        return {"inference_id": ask.inference_id}
    model_id = resolve_model_id(root, ask.model) if ask.model else None
    inputs: dict[str, Any] = {"model_id": model_id, "device": ask.device, "profile": ask.profile, "runtime": ask.runtime}
    if ask.generation is not None:  # greedy when absent: a request without it keeps the identity it always had
        inputs["generation"] = ask.generation.to_json_dict()
    return inputs


def run_identity(root: HitchRoot, ask: RunRequest) -> RunIdentityV1:
    """The identity of one submission (its model's defaults filled in: an omitted field is its default)."""
    values: dict[str, Any] = {
        "harness": ask.harness,
        "lock": _lock_inputs(root, ask),
        "engine": ask.engine,
        "launcher": ask.launcher,
        "image": ask.image,
        "fake_flags": ask.fake_flags,
        "capture": ask.capture,
        "capture_max_bytes": ask.capture_max_bytes,
        "for_containers": ask.for_containers,
        "eval_image": ask.eval_image,
        "trial": ask.trial,
        "submission": ask.submission,
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


def new_run_id() -> str:
    """A fresh random run id (``run-<16 hex>``): chosen by the caller, so its progress can be asked for by it."""
    return "run-" + secrets.token_hex(8)
