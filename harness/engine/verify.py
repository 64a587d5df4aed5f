"""``/server_info`` against the lock: is the engine that answers the one we launched, with our settings?

SGLang's ``/server_info`` echoes every ServerArgs field after its own resolution, plus the effective token
pool ``max_total_num_tokens`` (reference sglang-http-api.md §3.1). :func:`expected_server_info` lists what the
lock pins; :func:`verify_server_info` compares and raises ``inference_lock_mismatch`` naming every field that
differs. The engine's ``api_key`` is compared too (constant time): a server on our port that does not hold
this epoch's key is not ours, whatever else it reports. Key values never enter the error.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

from harness.contracts.lock import CpuPlatformV1, InferenceLockV1, MetalPlatformV1
from harness.engine.argv import wire_model_name
from harness.engine.keys import EngineKeys
from harness.errors import HitchError

__all__ = ["expected_server_info", "verify_server_info"]


def expected_server_info(lock: InferenceLockV1, model_dir: Path, port: int, *, probe: bool = False) -> dict[str, Any]:
    """Field → value the engine must report for ``lock`` (server args and effective values). On prepare's
    ``probe`` start the pool and prefill sizes are SGLang's to choose: only their being unset as arguments
    is checked (``harness/engine/probe.py`` reads what SGLang chose)."""
    ex = lock.execution
    expected: dict[str, Any] = {
        "model_path": str(model_dir),
        "served_model_name": wire_model_name(lock.model_id),
        "port": port,
        "device": ex.platform.backend,
        "dtype": ex.dtype,
        "kv_cache_dtype": ex.kv_cache_dtype,
        "attention_backend": ex.attention_backend,
        "sampling_backend": ex.sampling_backend,
        "context_length": ex.context_tokens_per_request,
        "max_running_requests": ex.max_running_requests,
        "max_queued_requests": ex.max_queued_requests,
        "max_total_tokens": ex.max_total_tokens,
        "max_total_num_tokens": ex.max_total_tokens,
        "chunked_prefill_size": ex.chunked_prefill_size,
        "max_prefill_tokens": ex.max_prefill_tokens,
        "mem_fraction_static": ex.platform.mem_fraction_static if not isinstance(ex.platform, MetalPlatformV1) else None,
        "random_seed": lock.generation.seed,
        "disable_radix_cache": ex.prefix_cache.mode == "disabled",
        # An engine started without the parser answers tool calls as text while the lock claims them.
        "tool_call_parser": lock.protocol.tool_call_parser,
    }
    if isinstance(ex.platform, CpuPlatformV1):
        expected["disable_overlap_schedule"] = True
    if probe:
        for name in ("max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens"):
            del expected[name]
        expected["max_total_tokens"] = None
    return expected


def _same(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return actual is wanted
    if isinstance(wanted, int | float) and isinstance(actual, int | float):
        return float(actual) == float(wanted)
    return bool(actual == wanted)


def _pool_hint(mismatches: list[dict[str, Any]]) -> str:
    """Why a smaller pool is refused, and what to do: SGLang sizes its pool from the memory free at start, and
    a start that finds less than the sealed lock's pool (other processes holding memory) cannot reproduce it."""
    pool = next((m for m in mismatches if m["field"] == "max_total_num_tokens"), None)
    if pool is None or not isinstance(pool["actual"], int) or not isinstance(pool["expected"], int):
        return ""
    if pool["actual"] >= pool["expected"]:
        return ""
    return (
        f" (the engine sized its token pool at {pool['actual']} tokens from the memory free now, the lock seals "
        f"{pool['expected']}: free memory and start again, or re-run `hitch local prepare` on this machine's usual load)"
    )


def verify_server_info(info: dict[str, Any], expected: dict[str, Any], keys: EngineKeys) -> None:
    """Raise ``inference_lock_mismatch`` naming each field where ``info`` differs from ``expected``."""
    mismatches: list[dict[str, Any]] = []
    for name, wanted in expected.items():
        actual = info.get(name)
        if not _same(actual, wanted):
            mismatches.append({"field": name, "expected": wanted, "actual": actual})
    reported_key = info.get("api_key")
    if not (isinstance(reported_key, str) and hmac.compare_digest(reported_key.encode(), keys.api_key.encode())):
        mismatches.append({"field": "api_key", "expected": "<this epoch's key>", "actual": "<another or none>"})
    if mismatches:
        names = ", ".join(m["field"] for m in mismatches)
        raise HitchError(
            "inference_lock_mismatch",
            f"the engine's /server_info does not match the lock: {names}{_pool_hint(mismatches)}",
            {"fields": [m["field"] for m in mismatches], "mismatches": mismatches},
        )
