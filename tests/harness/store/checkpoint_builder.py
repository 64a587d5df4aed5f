"""Writes minimal valid HF safetensors checkpoints for store tests (numpy + safetensors + tokenizers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, pre_tokenizers

CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}<|assistant|>"
VOCAB = ["<unk>", "<s>", "</s>", "hello", "world", "the", "a"]


def _tensors(seed: int, names: list[str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((4, 8)).astype(np.float32) for name in names}


def write_checkpoint(path: Path, *, sharded: bool = False, seed: int = 0) -> Path:
    """A tiny LlamaForCausalLM-shaped checkpoint at ``path`` (created)."""
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "float32",
        "hidden_size": 8,
        "num_hidden_layers": 1,
        "vocab_size": len(VOCAB),
        "max_position_embeddings": 128,
    }
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"temperature": 0.0}))
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    tokenizer_config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": CHAT_TEMPLATE}
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    names = ["model.embed_tokens.weight", "model.layers.0.mlp.weight", "lm_head.weight"]
    if not sharded:
        save_file(_tensors(seed, names), str(path / "model.safetensors"))
        return path
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    weight_map: dict[str, str] = {}
    for i, (shard, shard_names) in enumerate(shards.items()):
        save_file(_tensors(seed + i, shard_names), str(path / shard))
        weight_map.update({n: shard for n in shard_names})
    index = {"metadata": {"total_size": 3 * 4 * 8 * 4}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return path
