"""Probe, then seal (hermetic): what SGLang chose on the probe start becomes the lock's numbers, a different
pool is a different lock identity, a pool that cannot hold one request fails, and the probe start leaves
the sealed values to the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.engine import engine_flags, expected_server_info
from harness.engine.probe import probed_values, seal_probed
from harness.errors import HitchError
from harness.lock import CPU_MEM_FRACTION_STATIC, save_sealed_lock, sealed_for_draft, validate_lock
from harness.paths import HitchRoot
from tests.harness.service.manager_fakes import make_lock


def _chosen(pool: int, **changes: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "max_total_num_tokens": pool,
        "chunked_prefill_size": 4096,
        "max_prefill_tokens": 16384,
        "attention_backend": "torch_native",
        "sampling_backend": "pytorch",
        "api_key": "never-read",
    }
    info.update(changes)
    return info


def test_the_probed_pool_is_sealed_and_a_different_pool_is_a_different_identity() -> None:
    draft = make_lock(context=4096)
    first = seal_probed(draft, probed_values(_chosen(50_000)))
    second = seal_probed(draft, probed_values(_chosen(60_000)))
    # sealed with the CPU headroom held back (a later start may find less of the host's memory free)
    assert first.execution.max_total_tokens == 25_000 and second.execution.max_total_tokens == 30_000
    assert first.execution.chunked_prefill_size == 4096 and first.execution.max_prefill_tokens == 16384
    assert len({draft.inference_id, first.inference_id, second.inference_id}) == 3
    assert validate_lock(first.to_json_dict()) == first
    assert seal_probed(draft, probed_values(_chosen(50_000))).inference_id == first.inference_id  # a pure function


def test_a_probe_equal_to_the_draft_keeps_its_identity() -> None:
    draft = make_lock(context=4096)
    ex = draft.execution
    same = {
        "max_total_num_tokens": ex.max_total_tokens,
        "chunked_prefill_size": ex.chunked_prefill_size,
        "max_prefill_tokens": ex.max_prefill_tokens,
        "attention_backend": ex.attention_backend,
        "sampling_backend": ex.sampling_backend,
    }
    assert seal_probed(draft, probed_values(same)).inference_id == draft.inference_id


def test_the_headroom_never_seals_less_than_one_full_context_request() -> None:
    assert seal_probed(make_lock(context=4096), probed_values(_chosen(6000))).execution.max_total_tokens == 4096


def test_a_cuda_pool_keeps_a_smaller_headroom() -> None:
    cuda = make_lock(context=4096, device="cuda")
    chosen = _chosen(100_000, attention_backend="flashinfer", sampling_backend="flashinfer")
    assert seal_probed(cuda, probed_values(chosen)).execution.max_total_tokens == 90_000


def test_a_pool_below_one_full_context_request_fails_prepare() -> None:
    with pytest.raises(HitchError) as caught:
        seal_probed(make_lock(context=4096), probed_values(_chosen(4095)))
    assert caught.value.code == "inference_capacity_exceeded"
    assert caught.value.details == {"max_total_num_tokens": 4095, "context_tokens_per_request": 4096}


@pytest.mark.parametrize(
    "changes",
    [{"max_total_num_tokens": None}, {"chunked_prefill_size": "4096"}, {"max_prefill_tokens": True}, {"attention_backend": 1}],
)
def test_a_server_info_without_the_chosen_values_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(HitchError) as caught:
        probed_values(_chosen(50_000, **changes))
    assert caught.value.code == "inference_engine_unhealthy"
    assert caught.value.details["fields"] == [next(iter(changes))]


def test_the_probe_start_leaves_pool_and_prefill_to_the_engine() -> None:
    lock = make_lock(context=4096)
    probe = engine_flags(lock, Path("/m"), "127.0.0.1", 4000, "/c.yaml", probe=True)
    sealed = engine_flags(lock, Path("/m"), "127.0.0.1", 4000, "/c.yaml")
    for flag in ("--max-total-tokens", "--chunked-prefill-size", "--max-prefill-tokens"):
        assert flag not in probe and flag in sealed
    # the memory budget is the lock's, on both starts
    assert probe[probe.index("--mem-fraction-static") + 1] == str(CPU_MEM_FRACTION_STATIC)
    assert sealed[sealed.index("--mem-fraction-static") + 1] == str(CPU_MEM_FRACTION_STATIC)
    expected = expected_server_info(lock, Path("/m"), 4000, probe=True)
    assert expected["max_total_tokens"] is None and expected["mem_fraction_static"] == CPU_MEM_FRACTION_STATIC
    assert not {"max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens"} & set(expected)


def test_a_run_finds_the_newest_lock_sealed_from_its_draft(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    draft = make_lock(context=4096)
    assert sealed_for_draft(root, draft.inference_id) is None
    older, newer = (seal_probed(draft, probed_values(_chosen(pool))) for pool in (50_000, 60_000))
    for lock, at in ((newer, 2.0), (older, 1.0)):
        validation = {"inference_id": lock.inference_id, "draft_inference_id": draft.inference_id, "validated_at": at}
        save_sealed_lock(root, lock, validation)
    # a run of this model/device/profile uses the sealed lock: prepare does not run (and start engines) again
    assert sealed_for_draft(root, draft.inference_id) == newer.inference_id
    save_sealed_lock(root, draft, {"inference_id": draft.inference_id, "draft_inference_id": draft.inference_id})
    assert sealed_for_draft(root, draft.inference_id) == draft.inference_id
