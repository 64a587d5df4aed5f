"""catalog/model_fixtures.toml and its strict loader: the committed pins and facts, the tiny fixture's
pin reproduced by a fresh build, and malformed catalogs refused with ``model_fixture_catalog_invalid``."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.model_fixtures import MODEL_FIXTURES_PATH, fixture_by_key, fixture_for_model_id, load_model_fixtures
from fixtures.checkpoint import build_tiny_checkpoint
from fixtures.smollm2 import SMOLLM2_SOURCE
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.store import import_model


def test_the_catalog_holds_both_fixtures_with_their_facts() -> None:
    entries = {e.key: e for e in load_model_fixtures()}
    assert sorted(entries) == ["smollm2", "tiny"]
    smol, tiny = entries["smollm2"], entries["tiny"]
    assert (smol.ref, smol.name, smol.architecture, smol.license) == (
        "fixture:smollm2",
        "SmolLM2-135M-Instruct",
        "LlamaForCausalLM",
        "Apache-2.0",
    )
    assert smol.parameter_count == 134_515_008
    assert smol.pinned_source == SMOLLM2_SOURCE
    assert set(smol.not_applicable) == {"tool_loop"}  # measured: it answers Codex in prose, calls no tool
    assert tiny.ref == "fixture:tiny" and tiny.pinned_source is None
    assert set(tiny.not_applicable) == {"natural_stop", "question_answering", "closed_tool_call", "tool_loop"}
    assert fixture_by_key("fixture:tiny") == tiny
    assert fixture_for_model_id(smol.model_id) == smol
    assert fixture_for_model_id("sha256:" + "0" * 64) is None


def test_a_fresh_tiny_build_has_the_pinned_model_id(tmp_path: Path) -> None:
    built = build_tiny_checkpoint(tmp_path / "tiny")
    result = import_model(HitchRoot.at(tmp_path / "root"), built, "tiny")
    assert result.model_id == fixture_by_key("tiny").model_id


def test_an_unknown_fixture_is_a_usage_error() -> None:
    with pytest.raises(HitchError) as err:
        fixture_by_key("llama-70b")
    assert err.value.code == "usage_error"
    assert err.value.details["known"] == ["tiny", "smollm2"]


def _variant(tmp_path: Path, old: str, new: str, count: int = 1) -> Path:
    text = MODEL_FIXTURES_PATH.read_text()
    assert old in text
    path = tmp_path / "model_fixtures.toml"
    path.write_text(text.replace(old, new, count))
    return path


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('build = "hitch fixtures smollm2 OUT"', 'build = "hitch fixtures smollm2 OUT"\nsize = 1', "size"),
        ('model_id = "sha256:b88d', 'model_id = "sha1:b88d', "model_id"),
        ("natural_stop = ", "never_stops = ", "never_stops"),
        ("parameter_count = 134515008", "parameter_count = 0", "parameter_count"),
        ("wheel_size = 92871040", 'wheel_size = "big"', "wheel_size"),
    ],
    ids=["unknown-field", "bad-model-id", "unknown-behaviour", "zero-parameters", "bad-wheel-size"],
)
def test_a_malformed_catalog_is_refused(tmp_path: Path, old: str, new: str, problem: str) -> None:
    with pytest.raises(HitchError) as err:
        load_model_fixtures(_variant(tmp_path, old, new))
    assert err.value.code == "model_fixture_catalog_invalid"
    assert any(problem in p["loc"] for p in err.value.details["problems"]), err.value.details


def test_a_repeated_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HitchError) as err:
        load_model_fixtures(_variant(tmp_path, 'key = "smollm2"', 'key = "tiny"'))
    assert err.value.code == "model_fixture_catalog_invalid"
    assert err.value.details == {"key": ["tiny"]}


def test_unreadable_toml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HitchError) as err:
        load_model_fixtures(_variant(tmp_path, "[[fixture]]", "[[fixture]"))
    assert err.value.code == "model_fixture_catalog_invalid"
