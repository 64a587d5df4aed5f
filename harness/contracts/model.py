"""LocalModelManifestV1: what a checkpoint in the content-addressed store is (spec §6.1, §7.2).

``model_id`` is the sha256 of the canonical JSON of the manifest's *identity part*
(every field except ``model_id`` and ``provenance``): file bytes, template or
quantization changes give a new id; aliases, timestamps and source paths never appear.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256
from harness.ids import digest_json
from harness.sglang_parsers import ToolCallParserName

__all__ = [
    "ChatTemplateRef",
    "LocalModelManifestV1",
    "ModelArchitecture",
    "ModelFileEntry",
    "ModelProvenance",
    "WeightIndex",
    "compute_model_id",
    "model_identity_part",
]


class ModelFileEntry(Record):
    path: str = Field(description="POSIX path relative to the checkpoint root")
    size: int = Field(ge=0)
    sha256: Sha256


class WeightIndex(Record):
    shards: list[str] = Field(description="safetensors shard paths, sorted")
    index_file: str | None = Field(default=None, description="model.safetensors.index.json when sharded")
    tensor_count: int = Field(ge=1)
    total_tensor_bytes: int = Field(ge=0)
    dtypes: list[str] = Field(description="distinct safetensors dtypes, sorted")


class ModelArchitecture(Record):
    architectures: list[str]
    model_type: str
    torch_dtype: str | None
    quantization: str | None = Field(description="quantization_config.quant_method, if prequantized")
    max_position_embeddings: int | None
    vocab_size: int | None
    hidden_size: int | None
    num_hidden_layers: int | None


class ChatTemplateRef(Record):
    source: Literal["tokenizer_config.json", "chat_template.jinja", "chat_template.json"]
    sha256: Sha256 = Field(description="sha256 of the template text")
    tool_call_parser: ToolCallParserName | None = Field(
        default=None,
        description="the SGLang tool-call parser for the template's tool-call format: derived from the template "
        "family at import, or given at `hitch models add`; null = no known format (the model's locks then claim "
        "no tool calls). A serving choice, not checkpoint bytes: never part of model_id.",
    )


class ModelProvenance(Record):
    """Where the bytes came from, as far as we know. Never part of model_id."""

    source: Literal["verified", "user-declared", "unknown"] = "unknown"
    license: str | None = None


class LocalModelManifestV1(Record):
    schema_version: Literal["1"] = "1"
    model_id: Sha256
    format: Literal["hf-safetensors"] = "hf-safetensors"
    files: list[ModelFileEntry] = Field(description="every file of the checkpoint, sorted by path")
    weights: WeightIndex
    architecture: ModelArchitecture
    config_sha256: Sha256
    generation_config_sha256: Sha256 | None
    tokenizer_files: list[str]
    chat_template: ChatTemplateRef
    provenance: ModelProvenance = ModelProvenance()


def model_identity_part(manifest_fields: dict[str, Any]) -> dict[str, Any]:
    """The fields ``model_id`` is computed over (JSON form, without id, provenance and the tool-call parser)."""
    part = {k: v for k, v in manifest_fields.items() if k not in ("model_id", "provenance")}
    template = part.get("chat_template")
    if isinstance(template, dict):
        # Dropped, not nulled: manifests written before the field existed keep their ids.
        part["chat_template"] = {k: v for k, v in template.items() if k != "tool_call_parser"}
    return part


def compute_model_id(manifest_fields: dict[str, Any]) -> str:
    return digest_json(model_identity_part(manifest_fields))
