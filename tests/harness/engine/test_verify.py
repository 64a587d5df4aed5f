"""/server_info against the lock: every differing field is named; a foreign key is a mismatch."""

from __future__ import annotations

from typing import Any

import pytest

from harness.engine import EngineKeys, expected_server_info, verify_server_info
from harness.errors import HitchError
from tests.harness.engine.inputs import ServiceInputs

KEYS = EngineKeys("hek-" + "a" * 48, "hak-" + "b" * 48)


def _info(inputs: ServiceInputs, **changes: Any) -> dict[str, Any]:
    info = {**expected_server_info(inputs.lock, inputs.model_dir, 4000), "api_key": KEYS.api_key, "version": "0.5.23"}
    info.update(changes)
    return info


def test_matching_server_info_passes(inputs: ServiceInputs) -> None:
    verify_server_info(_info(inputs), expected_server_info(inputs.lock, inputs.model_dir, 4000), KEYS)


def test_mismatch_names_every_differing_field(inputs: ServiceInputs) -> None:
    info = _info(inputs, model_path="/elsewhere", max_total_num_tokens=999, disable_radix_cache=False, dtype="float16")
    with pytest.raises(HitchError) as caught:
        verify_server_info(info, expected_server_info(inputs.lock, inputs.model_dir, 4000), KEYS)
    err = caught.value
    assert err.code == "inference_lock_mismatch"
    # the command line's fields in its order (argv.engine_args), then the scheduler's effective pool
    assert err.details["fields"] == ["model_path", "dtype", "disable_radix_cache", "max_total_num_tokens"]
    # a pool smaller than the sealed one says why (memory free at start) and what to do
    assert "sized its token pool at 999 tokens from the memory free now" in err.message


def test_a_server_without_our_key_is_not_ours(inputs: ServiceInputs) -> None:
    with pytest.raises(HitchError) as caught:
        verify_server_info(_info(inputs, api_key="someone-else"), expected_server_info(inputs.lock, inputs.model_dir, 4000), KEYS)
    assert caught.value.details["fields"] == ["api_key"]
    assert "someone-else" not in str(caught.value.to_dict()) and KEYS.api_key not in str(caught.value.to_dict())
