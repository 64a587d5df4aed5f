"""Sealing with probed token-pool values (hermetic): when the engine's effective pool is the only value
that differs from the draft, the sealed lock carries the probed number under a new inference id."""

from __future__ import annotations

from harness.daemon.prepare import _probed_pool, with_pool
from harness.errors import HitchError
from harness.lock import validate_lock
from tests.harness.service.manager_fakes import make_lock


def _mismatch(*fields: tuple[str, object]) -> HitchError:
    mismatches = [{"field": name, "expected": 1, "actual": actual} for name, actual in fields]
    return HitchError("inference_lock_mismatch", "x", {"fields": [m["field"] for m in mismatches], "mismatches": mismatches})


def test_with_pool_is_a_valid_lock_with_a_new_id() -> None:
    draft = make_lock(context=4096)
    sealed = with_pool(draft, 5000)
    assert sealed.execution.max_total_tokens == 5000
    assert sealed.inference_id != draft.inference_id
    assert validate_lock(sealed.to_json_dict()) == sealed


def test_only_a_lone_pool_mismatch_is_sealed_from_the_probe() -> None:
    assert _probed_pool(_mismatch(("max_total_num_tokens", 5000))) == 5000
    assert _probed_pool(_mismatch(("max_total_num_tokens", 5000), ("dtype", "float16"))) is None
    assert _probed_pool(_mismatch(("model_path", "/elsewhere"))) is None
    assert _probed_pool(_mismatch(("max_total_num_tokens", "5000"))) is None
    assert _probed_pool(HitchError("inference_start_timeout", "x", {})) is None
