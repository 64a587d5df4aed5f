"""Probe, then seal (spec §6.2): the numbers SGLang chose on prepare's probe start become the lock's.

On the probe start (``engine_flags(..., probe=True)``) SGLang gets the lock's memory budget
(``mem_fraction_static``) but no token pool and no prefill sizes; it sizes them itself and reports them in
``/server_info`` (reference sglang-http-api.md §3.1): the effective pool ``max_total_num_tokens`` and the
resolved ``chunked_prefill_size`` / ``max_prefill_tokens``, with the attention and sampling backends it runs.
:func:`probed_values` reads those; :func:`seal_probed` writes them into the draft as numbers — a new
``inference_id`` whenever one differs from the draft. Every later start passes the sealed numbers and
``verify.py`` requires the engine to report them again (``inference_lock_mismatch`` otherwise).

The pool is sealed with :data:`POOL_HEADROOM` held back: SGLang sizes it from the memory free at that moment,
and a later start passing ``--max-total-tokens`` gets ``min(what memory holds then, the sealed pool)``. Without
headroom, any later start that finds a few megabytes less free would report a smaller pool and be refused. A
CPU engine shares the host's RAM with everything else on it (its pool is a fraction of what is *available*),
so it holds back half; a CUDA engine's leased GPU varies far less.
"""

from __future__ import annotations

from typing import Any

from harness.contracts.lock import InferenceLockV1, compute_inference_id
from harness.errors import HitchError

__all__ = ["POOL_HEADROOM", "PROBED_EXECUTION_FIELDS", "probed_values", "seal_probed", "sealed_pool"]

# execution field of the lock → the /server_info key holding SGLang's choice
PROBED_EXECUTION_FIELDS: dict[str, str] = {
    "max_total_tokens": "max_total_num_tokens",
    "chunked_prefill_size": "chunked_prefill_size",
    "max_prefill_tokens": "max_prefill_tokens",
    "attention_backend": "attention_backend",
    "sampling_backend": "sampling_backend",
}
# The share of the probed pool a later start may find missing and still reproduce the lock, per backend.
POOL_HEADROOM: dict[str, float] = {"cpu": 0.5, "cuda": 0.1}
_NUMBERS = ("max_total_tokens", "chunked_prefill_size", "max_prefill_tokens")


def probed_values(info: dict[str, Any]) -> dict[str, Any]:
    """The execution values SGLang chose, from its ``/server_info``; a missing or mistyped one is refused."""
    values: dict[str, Any] = {}
    bad: list[str] = []
    for field, key in PROBED_EXECUTION_FIELDS.items():
        value = info.get(key)
        wanted_type: type = int if field in _NUMBERS else str
        if isinstance(value, bool) or not isinstance(value, wanted_type):
            bad.append(key)
        else:
            values[field] = value
    if bad:
        raise HitchError(
            "inference_engine_unhealthy",
            f"/server_info does not report what the engine chose: {', '.join(bad)}",
            {"step": "server_info", "fields": bad},
        )
    return values


def sealed_pool(probed_pool: int, context_tokens: int, backend: str) -> int:
    """The pool a lock seals from the engine's: :data:`POOL_HEADROOM` held back, never below one request."""
    return max(context_tokens, probed_pool - int(probed_pool * POOL_HEADROOM[backend]))


def seal_probed(draft: InferenceLockV1, probed: dict[str, Any]) -> InferenceLockV1:
    """``draft`` with the probed values as its numbers (its own id when nothing differs)."""
    ex = draft.execution
    pool = probed["max_total_tokens"]
    if pool < ex.context_tokens_per_request:
        # spec §6.2: a pool that cannot hold one full-context request fails prepare
        raise HitchError(
            "inference_capacity_exceeded",
            f"the engine's token pool ({pool}) cannot hold one request of the lock's context "
            f"({ex.context_tokens_per_request}); lower --context or give the engine more memory",
            {"max_total_num_tokens": pool, "context_tokens_per_request": ex.context_tokens_per_request},
        )
    data = draft.to_json_dict()
    data["execution"].update({field: probed[field] for field in PROBED_EXECUTION_FIELDS})
    data["execution"]["max_total_tokens"] = sealed_pool(pool, ex.context_tokens_per_request, ex.platform.backend)
    data.pop("inference_id", None)
    data["inference_id"] = compute_inference_id(data)
    return InferenceLockV1.model_validate(data)
