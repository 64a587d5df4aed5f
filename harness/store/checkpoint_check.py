"""What a checkpoint directory must and must not contain before it enters the store.

:func:`scan_checkpoint` walks the directory and refuses pickles, Python files, device
files and symlinks that are absolute or leave the directory. :func:`check_checkpoint`
then reads the JSON configs and safetensors headers (never tensor data) and returns the
facts the manifest is built from. Both run on the source (to fail fast) and again on the
staged copy (the bytes actually published). Every refusal is ``local_model_invalid``.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.errors import HitchError
from harness.ids import digest_bytes, digest_json
from harness.sglang_parsers import ToolCallParserName
from harness.store.safetensors_check import SafetensorsHeader, read_safetensors_header
from harness.store.tool_call_format import tool_call_parser_for

__all__ = [
    "BANNED_SUFFIXES",
    "INDEX_FILE",
    "CheckpointFacts",
    "ChatTemplateFacts",
    "ScannedFile",
    "check_checkpoint",
    "scan_checkpoint",
]

# Pickle-based weights can execute code on load; Python files are custom model code.
BANNED_SUFFIXES = frozenset({".bin", ".pt", ".pkl", ".pickle", ".pth", ".ckpt", ".py", ".pyc", ".pyo", ".pyd", ".pyw"})
# Tool metadata that is not part of the checkpoint (git checkouts, `huggingface-cli download --local-dir`).
IGNORED_DIRS = frozenset({".git", ".cache"})
INDEX_FILE = "model.safetensors.index.json"
SINGLE_WEIGHTS = "model.safetensors"
REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "tokenizer.model",
        "chat_template.jinja",
        "chat_template.json",
    }
)
# JSON files whose keys are data (token strings, tensor names): never scanned for remote-code keys.
DATA_JSON = frozenset({"tokenizer.json", "vocab.json", "added_tokens.json", INDEX_FILE})
REMOTE_CODE_KEYS = ("auto_map", "trust_remote_code")


def _invalid(message: str, **details: Any) -> HitchError:
    return HitchError("local_model_invalid", message, details)


@dataclass(frozen=True)
class ScannedFile:
    rel: str  # POSIX path inside the checkpoint
    source: Path  # the regular file holding the bytes (a symlink's target inside the directory)


def _check_symlink(root: Path, entry: Path, rel: str) -> Path:
    target = os.readlink(entry)
    if os.path.isabs(target):
        raise _invalid(f"{rel} is an absolute symlink", file=rel)
    resolved = (entry.parent / target).resolve()
    if not resolved.is_relative_to(root):
        raise _invalid(f"{rel} is a symlink that leaves the checkpoint directory", file=rel)
    if not resolved.is_file():
        raise _invalid(f"{rel} is a symlink to something that is not a regular file", file=rel)
    return resolved


def scan_checkpoint(src: Path) -> list[ScannedFile]:
    """Every file of the checkpoint, sorted by path; refuses what may never be imported."""
    if not src.is_dir():
        raise _invalid(f"{src} is not a directory; only checkpoint directories can be imported", path=str(src))
    root = src.resolve()
    found: list[ScannedFile] = []
    pending = [root]
    while pending:
        current = pending.pop()
        with os.scandir(current) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            path = Path(entry.path)
            rel = path.relative_to(root).as_posix()
            if entry.is_symlink():
                target = _check_symlink(root, path, rel)
                source = target
            elif entry.is_dir(follow_symlinks=False):
                if current == root and entry.name in IGNORED_DIRS:
                    continue
                pending.append(path)
                continue
            elif stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                source = path
            else:
                raise _invalid(f"{rel} is not a regular file", file=rel)
            if path.suffix.lower() in BANNED_SUFFIXES:
                kind = "Python code" if path.suffix.lower().startswith(".py") else "a pickle-based weights file"
                raise _invalid(f"{rel} is {kind}; only safetensors checkpoints without custom code are accepted", file=rel)
            found.append(ScannedFile(rel, source))
    return sorted(found, key=lambda f: f.rel)


@dataclass(frozen=True)
class ChatTemplateFacts:
    source: Literal["tokenizer_config.json", "chat_template.jinja", "chat_template.json"]
    text_sha256: str  # sha256:<hex> of the template text (canonical JSON for named templates)
    tool_call_parser: ToolCallParserName | None = None  # read from the template text (tool_call_format)


@dataclass(frozen=True)
class CheckpointFacts:
    files: list[str]
    config: dict[str, Any]
    chat_template: ChatTemplateFacts
    shards: list[SafetensorsHeader]
    index_file: str | None
    tokenizer_files: list[str]
    generation_config: str | None


def _load_json(path: Path, rel: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _invalid(f"{rel} is not valid JSON ({exc.__class__.__name__})", file=rel) from None


def _find_keys(value: Any, keys: tuple[str, ...], trail: str = "") -> str | None:
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{trail}.{key}" if trail else str(key)
            if key in keys:
                return where
            found = _find_keys(item, keys, where)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _find_keys(item, keys, f"{trail}[{i}]")
            if found:
                return found
    return None


def _chat_template(base: Path, names: set[str], tokenizer_config: dict[str, Any]) -> ChatTemplateFacts:
    # Same precedence as transformers: a separate template file beats the tokenizer config.
    if "chat_template.jinja" in names:
        text = (base / "chat_template.jinja").read_bytes()
        if not text.strip():
            raise _invalid("chat_template.jinja is empty", file="chat_template.jinja")
        return ChatTemplateFacts("chat_template.jinja", digest_bytes(text), tool_call_parser_for(text.decode("utf-8", "replace")))
    if "chat_template.json" in names:
        data = _load_json(base / "chat_template.json", "chat_template.json")
        template = data.get("chat_template") if isinstance(data, dict) else None
        if not isinstance(template, str) or not template.strip():
            raise _invalid("chat_template.json has no chat_template string", file="chat_template.json")
        return ChatTemplateFacts("chat_template.json", digest_bytes(template.encode()), tool_call_parser_for(template))
    template = tokenizer_config.get("chat_template")
    if isinstance(template, str) and template.strip():
        return ChatTemplateFacts("tokenizer_config.json", digest_bytes(template.encode()), tool_call_parser_for(template))
    if isinstance(template, list) and template and all(isinstance(t, dict) for t in template):
        # Named templates (default, tool_use, ...): the family shows in any of them.
        texts = "\n".join(str(t.get("template", "")) for t in template)
        return ChatTemplateFacts("tokenizer_config.json", digest_json(template), tool_call_parser_for(texts))
    raise _invalid("no chat template: need tokenizer_config.json chat_template, chat_template.jinja or chat_template.json")


def _check_index(base: Path, names: set[str], shard_names: list[str]) -> list[SafetensorsHeader]:
    index = _load_json(base / INDEX_FILE, INDEX_FILE)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise _invalid(f"{INDEX_FILE} has no weight_map", file=INDEX_FILE)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise _invalid(f"{INDEX_FILE} weight_map must map tensor names to shard paths", file=INDEX_FILE)
    referenced = set(weight_map.values())
    missing = sorted(referenced - names)
    if missing:
        raise _invalid(f"{INDEX_FILE} references shards that do not exist", file=INDEX_FILE, missing_shards=missing)
    unreferenced = sorted(set(shard_names) - referenced)
    if unreferenced:
        raise _invalid(f"{INDEX_FILE} does not reference every shard", file=INDEX_FILE, unreferenced_shards=unreferenced)
    headers = [read_safetensors_header(base / name, name) for name in sorted(referenced)]
    by_name = {h.path: h for h in headers}
    for tensor, shard in weight_map.items():
        if tensor not in by_name[shard].tensors:
            raise _invalid(f"{INDEX_FILE} maps {tensor!r} to {shard}, which lacks it", file=INDEX_FILE, tensor=tensor)
    for header in headers:
        for tensor in header.tensors:
            if weight_map.get(tensor) != header.path:
                raise _invalid(f"{header.path} holds {tensor!r}, which {INDEX_FILE} maps elsewhere", tensor=tensor)
    return headers


def check_checkpoint(base: Path, files: list[str]) -> CheckpointFacts:
    """Validate the checkpoint at ``base`` whose files (relative paths) are ``files``."""
    names = set(files)
    missing = [name for name in REQUIRED_FILES if name not in names]
    if missing:
        raise _invalid(f"required files are missing: {', '.join(missing)}", missing=missing)
    parsed: dict[str, Any] = {}
    for rel in files:
        if rel.endswith(".json") and rel not in DATA_JSON and not rel.endswith(".index.json"):
            parsed[rel] = _load_json(base / rel, rel)
            where = _find_keys(parsed[rel], REMOTE_CODE_KEYS)
            if where:
                raise _invalid(f"{rel} asks for remote code ({where}); trust_remote_code models are unsupported", file=rel)
    config, tokenizer_config = parsed["config.json"], parsed["tokenizer_config.json"]
    if not isinstance(config, dict) or not isinstance(tokenizer_config, dict):
        raise _invalid("config.json and tokenizer_config.json must be JSON objects")
    template = _chat_template(base, names, tokenizer_config)
    shard_names = sorted(f for f in files if f.endswith(".safetensors"))
    if INDEX_FILE in names:
        headers, index_file = _check_index(base, names, shard_names), INDEX_FILE
    elif shard_names == [SINGLE_WEIGHTS]:
        headers, index_file = [read_safetensors_header(base / SINGLE_WEIGHTS, SINGLE_WEIGHTS)], None
    elif not shard_names:
        raise _invalid("no safetensors weights: need model.safetensors or shards with " + INDEX_FILE, missing=[SINGLE_WEIGHTS])
    else:
        raise _invalid(f"several safetensors files but no {INDEX_FILE}", shards=shard_names)
    if not any(h.tensors for h in headers):
        raise _invalid("the safetensors weights hold no tensors")
    return CheckpointFacts(
        files=list(files),
        config=config,
        chat_template=template,
        shards=headers,
        index_file=index_file,
        tokenizer_files=sorted(names & TOKENIZER_FILES),
        generation_config="generation_config.json" if "generation_config.json" in names else None,
    )
