"""The certified model in words: a fixture's facts from the committed catalog, any other checkpoint's from its
manifest and safetensors headers; the session's facts reach the signed predicate; fixture refs resolve to a
builder (an unknown one is a usage error)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from catalog.model_fixtures import fixture_by_key
from certify.evaluate import Evaluation
from certify.model_facts import model_facts
from certify.options import CertifyOptions
from certify.outputs import build_predicate
from certify.session import fixture_checkpoint
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.store import import_model


def test_a_fixture_is_described_by_the_catalog(tmp_path: Path, tiny_model: Path) -> None:
    root = HitchRoot.at(tmp_path / "root")
    result = import_model(root, tiny_model, "tiny")
    entry = fixture_by_key("tiny")
    assert result.manifest.model_id == entry.model_id
    facts = model_facts(root, entry.model_id, "local/tiny")
    assert (facts.name, facts.architecture, facts.parameters, facts.license, facts.source) == (
        entry.name,
        entry.architecture,
        entry.parameter_count,
        entry.license,
        entry.source,
    )


def test_another_checkpoint_is_described_by_its_manifest_and_weights(tmp_path: Path, tiny_model: Path) -> None:
    own = tmp_path / "own"
    shutil.copytree(tiny_model, own)
    generation = json.loads((own / "generation_config.json").read_text())
    (own / "generation_config.json").write_text(json.dumps({**generation, "max_new_tokens": 7}))  # not the fixture
    root = HitchRoot.at(tmp_path / "root")
    model_id = import_model(root, own, "mine").manifest.model_id
    assert model_id != fixture_by_key("tiny").model_id
    facts = model_facts(root, model_id, "local/mine")
    assert facts.name == "mine"
    assert facts.architecture == "LlamaForCausalLM"
    # the same tensors as the fixture: the catalog's count was computed by its builder, this one from the headers
    assert facts.parameters == fixture_by_key("tiny").parameter_count
    assert facts.license is None and facts.source is not None and "provenance: unknown" in facts.source
    assert model_facts(root, model_id, f"local/{model_id}").name is None  # addressed by digest: no name to show


def test_the_session_model_facts_reach_the_predicate(tmp_path: Path) -> None:
    entry = fixture_by_key("smollm2")
    opts = CertifyOptions(
        device="cpu", engine="fake", runtime=None, launcher="process", model="fixture:smollm2", profile="baseline",
        sign_key=None, report_dir=tmp_path, canary=False, root=HitchRoot.at(tmp_path / "root"),
    )  # fmt: skip
    facts = {"name": entry.name, "architecture": entry.architecture, "parameters": entry.parameter_count,
             "license": entry.license, "source": entry.source}  # fmt: skip
    session = {"model_id": entry.model_id, "model": facts, "engine": "fake"}
    predicate = build_predicate(opts, session, Evaluation("contract", [], []), {}, {}, {})
    assert predicate.model is not None and predicate.model.to_json_dict() == facts
    assert predicate.to_json_dict()["model"]["name"] == "SmolLM2-135M-Instruct"
    assert build_predicate(opts, {}, Evaluation("failed", [], []), {}, {}, {}).model is None


def test_fixture_refs_resolve_to_their_builder(tmp_path: Path, tiny_model: Path) -> None:
    built = fixture_checkpoint("fixture:tiny", tmp_path / "cache")
    assert sorted(p.name for p in built.iterdir()) == sorted(p.name for p in tiny_model.iterdir())
    with pytest.raises(HitchError) as info:
        fixture_checkpoint("fixture:nope", tmp_path / "cache")
    assert info.value.code == "usage_error" and info.value.details["known"] == ["tiny", "smollm2"]
