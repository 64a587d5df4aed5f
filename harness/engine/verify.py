"""``/server_info`` against the lock: is the engine that answers the one we launched, with our settings?

SGLang's ``/server_info`` echoes every ServerArgs field after its own resolution, plus the effective token
pool ``max_total_num_tokens`` (reference sglang-http-api.md §3.1). :func:`expected_server_info` lists what the
lock pins: the fields its command line sets (``argv.engine_args``: readiness never waits for a field the
command line does not set, and ``argv_check.py`` has SGLang's own parser and resolution, in the runtime's venv,
prove each one is echoed unchanged); :func:`verify_server_info` compares and raises ``inference_lock_mismatch``
naming every field that differs. The engine's ``api_key`` is compared too (constant time): a server on our port that does not hold
this epoch's key is not ours, whatever else it reports. Key values never enter the error.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

from harness.contracts.lock import InferenceLockV1
from harness.engine.argv import engine_args
from harness.engine.keys import EngineKeys
from harness.errors import HitchError

__all__ = ["SCHEDULER_INFO_FIELDS", "expected_server_info", "server_info_mismatches", "verify_server_info"]

# What /server_info reports beside the ServerArgs fields: the scheduler's effective values (reference §3.1).
SCHEDULER_INFO_FIELDS = ("max_total_num_tokens",)


def expected_server_info(
    lock: InferenceLockV1,
    model_dir: Path,
    port: int,
    *,
    host: str = "127.0.0.1",
    probe: bool = False,
    mem_fraction: float | None = None,
) -> dict[str, Any]:
    """Field → value the engine must report for ``lock``: every ServerArgs field the command line sets, from the
    same table as the flags (:func:`~harness.engine.argv.engine_args`), and the effective token pool. On
    prepare's ``probe`` start the pool and prefill sizes are SGLang's to choose: only the pool's being unset as
    an argument is checked (``harness/engine/probe.py`` reads what SGLang chose)."""
    args = engine_args(lock, model_dir, host, port, probe=probe, mem_fraction=mem_fraction)
    expected: dict[str, Any] = {arg.field: arg.value for arg in args if arg.echoed}
    if not probe:
        expected["max_total_num_tokens"] = lock.execution.max_total_tokens
    return expected


def server_info_mismatches(info: dict[str, Any], expected: dict[str, Any]) -> list[dict[str, Any]]:
    """``{"field", "expected", "actual"}`` for each field of ``expected`` that ``info`` reports otherwise."""
    return [
        {"field": name, "expected": wanted, "actual": info.get(name)}
        for name, wanted in expected.items()
        if not _same(info.get(name), wanted)
    ]


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
    mismatches = server_info_mismatches(info, expected)
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
