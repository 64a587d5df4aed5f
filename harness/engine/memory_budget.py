"""A sealed CPU lock's token pool as an absolute figure, whatever the neighbours hold (DESIGN §4, the manager).

SGLang 0.5.23 sizes a CPU engine's KV budget from the memory free *at that moment*
(``kv_cache_configurator._profile_available_bytes``): with ``pre`` the memory free before the weights load,

    rest = free after loading - pre * (1 - mem_fraction_static)  ~  mem_fraction_static * pre - weights

and the pool is ``min(--max-total-tokens, rest / bytes per token)``. A fixed fraction therefore gives a sealed
lock's engine a smaller pool whenever another engine (or a test suite) holds memory — refused as
``inference_lock_mismatch`` — and, with little free, no pool at all ("Loaded weights leave no GPU memory for the
KV cache"). So a sealed CPU start passes the fraction that holds *its* pool: the pool's bytes (an upper bound:
every layer's K and V at the lock's dtype), the weights and a margin, over what SGLang will see as ``pre``; never
below the lock's own fraction (its floor: the value a quiet machine needs), never above :data:`MAX_FRACTION`.
``--max-total-tokens`` still caps the pool, so a larger budget allocates nothing more. When the machine has not
the memory for the sealed pool, the start is refused with ``inference_capacity_exceeded`` naming what is missing,
before anything is launched. Prepare's probe start keeps the lock's fraction: it measures what SGLang chooses.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness.contracts.lock import CpuPlatformV1, InferenceLockV1
from harness.errors import HitchError

__all__ = ["ENGINE_BASE_BYTES", "MAX_FRACTION", "kv_bytes_per_token", "start_fraction"]

_MIB = 1 << 20
# what the engine's processes take before SGLang measures ``pre`` (imports, torch, the tokenizer): measured
# ~1.2 GB RSS for the generic-CPU runtime before the weights load; rounded up
ENGINE_BASE_BYTES = 1536 * _MIB
_MARGIN_BYTES = 256 * _MIB  # activations and allocator slack beside the pool
MAX_FRACTION = 0.9


def kv_bytes_per_token(model_dir: Path, dtype: str) -> int:
    """K and V of every layer for one token, from the checkpoint's ``config.json`` (GQA's KV heads when given)."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HitchError("local_model_integrity_failed", "the model's config.json cannot be read", {"error": str(exc)}) from exc
    layers = int(config.get("num_hidden_layers") or 1)
    heads = int(config.get("num_attention_heads") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or (int(config.get("hidden_size") or heads) // heads))
    width = 4 if dtype == "float32" else 2
    return 2 * layers * kv_heads * head_dim * width


def _weights_bytes(model_dir: Path) -> int:
    return sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))


def start_fraction(lock: InferenceLockV1, model_dir: Path, available_bytes: int, numa_nodes: int = 1) -> float:
    """The ``--mem-fraction-static`` a sealed CPU start passes so that its sealed pool fits in ``available_bytes``
    (the memory free now, split over ``numa_nodes`` as SGLang splits it); the lock's own fraction on a CUDA lock."""
    platform = lock.execution.platform
    if not isinstance(platform, CpuPlatformV1):
        return float(getattr(platform, "mem_fraction_static", 1.0))
    pool = lock.execution.max_total_tokens
    need = pool * kv_bytes_per_token(model_dir, lock.execution.dtype) + _weights_bytes(model_dir) + _MARGIN_BYTES
    pre = available_bytes // max(1, numa_nodes) - ENGINE_BASE_BYTES
    if pre <= 0 or need > pre * MAX_FRACTION:
        raise HitchError(
            "inference_capacity_exceeded",
            f"the sealed pool of {pool} tokens needs {need / _MIB:.0f} MiB beside the engine's own "
            f"{ENGINE_BASE_BYTES / _MIB:.0f} MiB; this machine has {available_bytes / _MIB:.0f} MiB free now",
            {"max_total_tokens": pool, "needed_bytes": need, "available_bytes": available_bytes, "numa_nodes": numa_nodes},
        )
    return max(platform.mem_fraction_static, math.ceil(need / pre * 1000) / 1000)
