"""The correctness suite's reference sets, prepared before a session starts its engine (on the tiny checkpoint:
fast). Skipped without the runtime (torch + transformers), failing under HITCH_REQUIRE_SGLANG=1."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.model_fixtures import fixture_by_key
from certify.reference_set import REFERENCE_SETS, prepare_references, reference_run
from fixtures.reference import reference_cache_dir
from harness.paths import HitchRoot
from harness.store import import_model
from tests.components import installed_sglang

pytestmark = [pytest.mark.integration, pytest.mark.needs_sglang]


def test_prepare_computes_every_set_the_model_needs_once_and_declares_the_rest(tiny_model: Path) -> None:
    installed_sglang()  # the reference runs in the runtime's venv
    root = HitchRoot.at()
    entry = fixture_by_key("tiny")
    import_model(root, tiny_model, "test-reference-tiny")
    first = prepare_references(root, entry.model_id)
    # the tiny checkpoint declares natural_stop not applicable: its set is never computed for it
    assert "natural_stop" in entry.not_applicable
    assert set(first) == {"parity", "eval"}
    again = prepare_references(root, entry.model_id)
    assert all(row["cached"] for row in again.values())
    for name, row in again.items():
        run, cached = reference_run(root, entry.model_id, name)
        assert cached and run.model_id == entry.model_id
        assert len(run.results) == row["prompts"] == len(REFERENCE_SETS[name].prompts)
        assert all(len(r.token_ids) == REFERENCE_SETS[name].max_new_tokens for r in run.results)  # random: no stop
    assert (reference_cache_dir(root) / "prepare.lock").exists()
