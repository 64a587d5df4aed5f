"""The conditions of a model comparison (spec §6.3, ``--across-models``): the model may differ, nothing else.

Two runs' sealed locks are compared part by part, the model's identity left out: the runtime, the profile, the
sampling (the lock's generation settings), the serving configuration (the execution settings), the protocol,
plus the machine and the cache condition. What a lock derives *from the model* (its context and output
budget capped by the model, the token pool and prefill sizes SGLang chose for it, the chat template's
compatibility profile, the model family's tool-call and reasoning parsers) may differ: each such difference is
listed as a note, never as a refusal. Any other difference is refused (``runs_not_comparable``) naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.compare.conditions import Condition
from harness.errors import HitchError

if TYPE_CHECKING:
    from harness.compare.runs import RunSide

__all__ = ["MODEL_DERIVED", "model_conditions"]

# lock part -> fields derived from the model (they may differ between two models)
MODEL_DERIVED: dict[str, tuple[str, ...]] = {
    "execution": ("context_tokens_per_request", "max_total_tokens", "chunked_prefill_size", "max_prefill_tokens"),
    "generation": ("max_output_tokens",),
    "protocol": ("compatibility_profile_id", "tool_call_parser", "reasoning_parser"),
}
_PARTS = (("runtime_id", "runtime_id"), ("profile", "profile"), ("sampling", "generation"),
          ("serving_config", "execution"), ("protocol", "protocol"))  # fmt: skip


def _part(lock: dict[str, Any], key: str) -> Any:
    value = lock.get(key)
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in MODEL_DERIVED.get(key, ())}
    return value


def _derived(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = []
    for part, fields in MODEL_DERIVED.items():
        for name in fields:
            x, y = (a.get(part) or {}).get(name), (b.get(part) or {}).get(name)
            if x != y:
                out.append(f"{part}.{name} differs with the model: {x} then {y}")
    return out


def model_conditions(a: RunSide, b: RunSide) -> tuple[list[Condition], list[str]]:
    """The strict conditions less the model (see the module docstring), and the model-derived differences."""
    if a.lock is None or b.lock is None:
        missing = a.run_id if a.lock is None else b.run_id
        raise HitchError(
            "runs_not_comparable",
            f"run {missing} kept no sealed lock: a model comparison needs both locks to compare every other condition",
            {"run_id": missing},
        )
    la, lb = a.lock.to_json_dict(), b.lock.to_json_dict()
    conditions = [Condition(name, _part(la, key), _part(lb, key)) for name, key in _PARTS]
    conditions += [
        Condition("hardware", a.hardware, b.hardware),
        Condition("cache_condition", a.execution.cache_condition, b.execution.cache_condition),
    ]
    notes = [f"models: {a.model_id} then {b.model_id}", *_derived(la, lb)]
    return conditions, notes
