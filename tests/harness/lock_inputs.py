"""Synthetic manifests for lock tests (no store, no catalog needed)."""

from __future__ import annotations

from typing import Any

from harness.contracts.model import LocalModelManifestV1, compute_model_id
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.ids import digest_bytes, digest_json


def model_manifest(
    max_positions: int | None = 32768, torch_dtype: str | None = "bfloat16", tool_call_parser: str | None = "hermes"
) -> LocalModelManifestV1:
    """The tiny fixture's manifest (its ChatML template renders Hermes <tool_call> markup: parser hermes)."""
    fields: dict[str, Any] = {
        "schema_version": "1",
        "format": "hf-safetensors",
        "files": [
            {"path": "config.json", "size": 600, "sha256": digest_bytes(b"config")},
            {"path": "model.safetensors", "size": 816_000, "sha256": digest_bytes(b"weights")},
            {"path": "tokenizer.json", "size": 90_000, "sha256": digest_bytes(b"tok")},
            {"path": "tokenizer_config.json", "size": 2_000, "sha256": digest_bytes(b"tokcfg")},
        ],
        "weights": {
            "shards": ["model.safetensors"],
            "index_file": None,
            "tensor_count": 21,
            "total_tensor_bytes": 815_000,
            "dtypes": ["BF16"],
        },
        "architecture": {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "torch_dtype": torch_dtype,
            "quantization": None,
            "max_position_embeddings": max_positions,
            "vocab_size": 2048,
            "hidden_size": 64,
            "num_hidden_layers": 2,
        },
        "config_sha256": digest_bytes(b"config"),
        "generation_config_sha256": None,
        "tokenizer_files": ["tokenizer.json", "tokenizer_config.json"],
        "chat_template": {
            "source": "tokenizer_config.json",
            "sha256": digest_bytes(b"template"),
            "tool_call_parser": tool_call_parser,
        },
    }
    fields["model_id"] = compute_model_id(fields)
    return LocalModelManifestV1.model_validate(fields)


def runtime_manifest(backend: str = "cpu", amx: bool = False, pinned: bool = True) -> InferenceRuntimeManifestV1:
    fields: dict[str, Any] = {
        "name": f"sglang-test-{backend}",
        "engine_version": "0.5.23",
        "engine_commit": "0" * 40,
        "backend": backend,
        "cpu_feature_requirement": ("amx" if amx else "none") if backend == "cpu" else None,
        "certifiable": amx or backend == "cuda",
        "pinned": pinned,
        "package": {
            "kind": "oci",
            "image": "lmsysorg/sglang",
            "digest": digest_bytes(b"image") if pinned else None,
        },
    }
    fields["runtime_id"] = digest_json(fields)
    return InferenceRuntimeManifestV1.model_validate(fields)
