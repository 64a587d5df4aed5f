"""Build, store, read and verify :class:`LocalModelManifestV1` records.

A published model is two things: ``store/model-files/sha256/<hex>/`` (the checkpoint,
read-only files) and ``store/models/sha256/<hex>/manifest.json``. The manifest is written
last, so its presence is what "published" means. Reading a manifest re-derives its
``model_id``; :func:`verify_model_files` re-hashes the published files against it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.contracts.base import parse_record
from harness.contracts.model import (
    ChatTemplateRef,
    LocalModelManifestV1,
    ModelArchitecture,
    ModelFileEntry,
    ModelProvenance,
    WeightIndex,
    compute_model_id,
)
from harness.errors import HitchError
from harness.ids import is_sha256_id
from harness.paths import HitchRoot
from harness.store.checkpoint_check import CheckpointFacts
from harness.store.hashing import FileDigest, hash_file
from harness.store.tool_call_format import resolve_tool_call_parser

__all__ = [
    "build_manifest",
    "list_model_ids",
    "manifest_path",
    "model_files_dir",
    "read_manifest",
    "verify_model_files",
]

_INT_FIELDS = ("max_position_embeddings", "vocab_size", "hidden_size", "num_hidden_layers")


def model_files_dir(root: HitchRoot, model_id: str) -> Path:
    """The checkpoint directory of a published model (what the engine loads)."""
    return root.digest_dir(root.model_files, model_id)


def manifest_path(root: HitchRoot, model_id: str) -> Path:
    return root.digest_dir(root.models, model_id) / "manifest.json"


def _invalid(message: str, **details: Any) -> HitchError:
    return HitchError("local_model_invalid", message, details)


def _architecture(config: dict[str, Any]) -> ModelArchitecture:
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures or not all(isinstance(a, str) for a in architectures):
        raise _invalid("config.json has no architectures list", file="config.json")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise _invalid("config.json has no model_type", file="config.json")
    # Multimodal-style configs keep the language model's sizes under text_config.
    raw_text_config = config.get("text_config")
    text_config: dict[str, Any] = raw_text_config if isinstance(raw_text_config, dict) else {}
    sizes: dict[str, int | None] = {}
    for key in _INT_FIELDS:
        value = config.get(key, text_config.get(key))
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise _invalid(f"config.json {key} must be an integer", file="config.json")
        sizes[key] = value
    dtype = config.get("torch_dtype", config.get("dtype"))
    if dtype is not None and not isinstance(dtype, str):
        raise _invalid("config.json torch_dtype must be a string", file="config.json")
    quant = config.get("quantization_config")
    quant_method = quant.get("quant_method") if isinstance(quant, dict) else None
    if quant is not None and not isinstance(quant_method, str):
        raise _invalid("config.json quantization_config has no quant_method", file="config.json")
    return ModelArchitecture(
        architectures=list(architectures),
        model_type=model_type,
        torch_dtype=dtype,
        quantization=quant_method,
        **sizes,
    )


def build_manifest(
    facts: CheckpointFacts,
    digests: dict[str, FileDigest],
    provenance: ModelProvenance | None = None,
    tool_call_parser: str | None = None,
) -> LocalModelManifestV1:
    """The manifest of a checked checkpoint whose every file was hashed into ``digests``; ``tool_call_parser``
    is the operator's choice (a parser name or ``none``), else the one the chat template shows."""
    files = [ModelFileEntry(path=rel, size=digests[rel].size, sha256=digests[rel].sha256_id) for rel in sorted(facts.files)]
    tensors = [t for header in facts.shards for t in header.tensors.values()]
    weights = WeightIndex(
        shards=sorted(h.path for h in facts.shards),
        index_file=facts.index_file,
        tensor_count=len(tensors),
        total_tensor_bytes=sum(t.end - t.begin for t in tensors),
        dtypes=sorted({t.dtype for t in tensors}),
    )
    fields: dict[str, Any] = {
        "schema_version": "1",
        "format": "hf-safetensors",
        "files": [f.to_json_dict() for f in files],
        "weights": weights.to_json_dict(),
        "architecture": _architecture(facts.config).to_json_dict(),
        "config_sha256": digests["config.json"].sha256_id,
        "generation_config_sha256": digests[facts.generation_config].sha256_id if facts.generation_config else None,
        "tokenizer_files": list(facts.tokenizer_files),
        "chat_template": ChatTemplateRef(
            source=facts.chat_template.source,
            sha256=facts.chat_template.text_sha256,
            tool_call_parser=resolve_tool_call_parser(facts.chat_template.tool_call_parser, tool_call_parser),
        ).to_json_dict(),
    }
    model_id = compute_model_id(fields)
    prov = (provenance or ModelProvenance()).to_json_dict()
    return parse_record(LocalModelManifestV1, {**fields, "model_id": model_id, "provenance": prov}, "internal_error")


def read_manifest(root: HitchRoot, model_id: str) -> LocalModelManifestV1:
    """The published manifest of ``model_id``; a manifest that does not hash to its id is an integrity failure."""
    if not is_sha256_id(model_id):
        raise HitchError("local_model_not_found", f"{model_id!r} is not a sha256:<hex> model id", {"model_id": model_id})
    path = manifest_path(root, model_id)
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        quarantine = root.digest_dir(root.quarantine, model_id)
        if quarantine.is_dir():  # unpublished by a failed re-hash (harness.store.start_check)
            raise HitchError(
                "local_model_integrity_failed",
                f"model {model_id} was quarantined (a file no longer matched its manifest; see {quarantine}): "
                "import the same checkpoint again (`hitch models add DIR --name ALIAS`)",
                {"model_id": model_id, "quarantined": str(quarantine)},
            ) from None
        raise HitchError("local_model_not_found", f"no model {model_id} in this root", {"model_id": model_id}) from None
    except (OSError, ValueError) as exc:
        raise HitchError("local_model_integrity_failed", f"manifest of {model_id} is unreadable", {"error": str(exc)}) from exc
    manifest = parse_record(LocalModelManifestV1, data, "local_model_integrity_failed")
    derived = compute_model_id(manifest.to_json_dict())
    if manifest.model_id != model_id or derived != model_id:
        raise HitchError(
            "local_model_integrity_failed",
            f"manifest stored under {model_id} does not hash to it",
            {"model_id": model_id, "manifest_model_id": manifest.model_id, "derived_model_id": derived},
        )
    return manifest


def list_model_ids(root: HitchRoot) -> list[str]:
    """Ids of every published model (a manifest exists), sorted."""
    if not root.models.is_dir():
        return []
    return sorted(
        f"sha256:{entry.name}"
        for entry in root.models.iterdir()
        if is_sha256_id(f"sha256:{entry.name}") and (entry / "manifest.json").is_file()
    )


def verify_model_files(root: HitchRoot, manifest: LocalModelManifestV1) -> None:
    """Re-hash the published files; any missing, extra or changed file is an integrity failure."""
    base = model_files_dir(root, manifest.model_id)
    if not base.is_dir():
        raise HitchError("local_model_integrity_failed", f"files of {manifest.model_id} are missing", {"dir": str(base)})
    present = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file() or p.is_symlink())
    expected = [f.path for f in manifest.files]
    if present != expected:
        raise HitchError(
            "local_model_integrity_failed",
            f"published file set of {manifest.model_id} differs from its manifest",
            {"missing": sorted(set(expected) - set(present)), "extra": sorted(set(present) - set(expected))},
        )
    for entry in manifest.files:
        path = base / entry.path
        if path.is_symlink():
            raise HitchError("local_model_integrity_failed", f"{entry.path} became a symlink", {"file": entry.path})
        digest = hash_file(path)
        if digest.size != entry.size or digest.sha256_id != entry.sha256:
            raise HitchError(
                "local_model_integrity_failed",
                f"{entry.path} no longer matches the manifest",
                {"file": entry.path, "expected": entry.sha256, "actual": digest.sha256_id},
            )
