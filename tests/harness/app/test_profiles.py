"""Harness compatibility profiles: the admission rule and the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.app.profiles import (
    CODEX_FIELDS,
    MODEL_CALL_FIELDS,
    ProfileStore,
    codex_key,
    model_call_key,
    profile_id,
    require_lock_values,
    result,
)
from harness.contracts.agent_profile import HarnessCompatibilityProfileV1
from harness.errors import HitchError
from harness.ids import digest_json
from harness.paths import HitchRoot
from tests.gateway.support import make_lock


def _store(tmp_path: Path) -> ProfileStore:
    return ProfileStore(HitchRoot(tmp_path / "root"))


def test_no_profile_is_refused(tmp_path: Path) -> None:
    key = codex_key(make_lock(), "npm:@openai/codex@0.171.0", "0.171.0")
    with pytest.raises(HitchError) as err:
        _store(tmp_path).require_passing(key)
    assert err.value.code == "inference_harness_unsupported"


def test_a_failed_check_is_refused_and_a_rerun_that_passes_replaces_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    key = codex_key(make_lock(), "npm:@openai/codex@0.171.0", "0.171.0")
    store.record(key, CODEX_FIELDS, result("agents.codex.turn", "fake", "cpu", True))
    store.record(key, CODEX_FIELDS, result("agents.codex.tool_loop", "fake", "cpu", False))
    with pytest.raises(HitchError) as err:
        store.require_passing(key)
    assert err.value.details["failed"] == ["agents.codex.tool_loop"]
    store.record(key, CODEX_FIELDS, result("agents.codex.tool_loop", "fake", "cpu", True))
    profile = store.require_passing(key)
    assert sorted(r.check_id for r in profile.results) == ["agents.codex.tool_loop", "agents.codex.turn"]
    on_disk = json.loads((store.dir / (profile_id(key).split(":")[1] + ".json")).read_text())
    assert HarnessCompatibilityProfileV1.model_validate(on_disk).profile_id == profile_id(key)


def test_another_version_or_runtime_is_another_profile(tmp_path: Path) -> None:
    store = _store(tmp_path)
    lock = make_lock()
    key = codex_key(lock, "npm:@openai/codex@0.171.0", "0.171.0")
    store.record(key, CODEX_FIELDS, result("agents.codex.turn", "fake", "cpu", True))
    other = codex_key(lock, "npm:@openai/codex@0.169.0", "0.169.0")
    with pytest.raises(HitchError):
        store.require_passing(other)
    assert profile_id(model_call_key(lock)) != profile_id(key)


def test_every_field_codex_sends_has_a_rule() -> None:
    fields = {rule.field for rule in CODEX_FIELDS}
    for name in ("input[].role=developer", "input[].id", "include", "reasoning", "prompt_cache_key", "client_metadata",
                 "tools[].type!=function", "parallel_tool_calls", "store", "previous_response_id"):  # fmt: skip
        assert name in fields


def test_the_field_tables_are_the_measured_ones() -> None:
    """The tables as written into every profile (``fields``): pinned, so an edit to the shipped data is deliberate."""
    assert digest_json([r.to_json_dict() for r in CODEX_FIELDS]) == (
        "sha256:dc507b272b2164da0a336607f08da8f85cc2d6695905a53496d2c418c21463df"
    )
    assert digest_json([r.to_json_dict() for r in MODEL_CALL_FIELDS]) == (
        "sha256:87b266a48a73bdb85fb54215d9baa9011f8929307ac34228ee7477b26492d44d"
    )


def test_results_on_another_engine_do_not_certify_this_one(tmp_path: Path) -> None:
    store = _store(tmp_path)
    key = codex_key(make_lock(), "npm:@openai/codex@0.171.0", "0.171.0")
    store.record(key, CODEX_FIELDS, result("agents.codex.tool_loop", "fake", "cpu", True))
    assert store.require_passing(key, "fake").key == key
    with pytest.raises(HitchError) as err:
        store.require_passing(key, "sglang")
    assert err.value.code == "inference_harness_unsupported" and err.value.details["engine"] == "sglang"


def test_a_lock_whose_parallel_tool_calls_differ_from_what_codex_sends_refuses_codex() -> None:
    [rule] = [r for r in CODEX_FIELDS if r.field == "parallel_tool_calls"]
    assert rule.sends is True  # Codex 0.171 always sends true (recorded in every Codex profile)
    key = codex_key(make_lock(), "npm:@openai/codex@0.171.0", "0.171.0")
    require_lock_values(key, CODEX_FIELDS, parallel_tool_calls=True)
    with pytest.raises(HitchError) as err:
        require_lock_values(key, CODEX_FIELDS, parallel_tool_calls=False)
    assert err.value.code == "inference_harness_unsupported"
    assert (err.value.details["field"], err.value.details["sends"]) == ("parallel_tool_calls", True)
    require_lock_values(model_call_key(make_lock()), MODEL_CALL_FIELDS, parallel_tool_calls=False)  # no tools sent
