"""Model aliases (``indexes/models/aliases.json``) and ``local/...`` reference resolution.

Aliases are pointers for people, never identity: re-pointing one is allowed and
reported (old -> new). The index is rewritten atomically under a file mutex, so two
concurrent ``models add`` never lose each other's alias.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Literal

from filelock import FileLock
from pydantic import Field

from harness.contracts.base import Record, Sha256, parse_record
from harness.contracts.model import LocalModelManifestV1
from harness.errors import HitchError
from harness.ids import is_sha256_id
from harness.paths import HitchRoot, atomic_write_json
from harness.store.manifest import read_manifest

__all__ = [
    "ALIAS_RE",
    "ModelAliasIndexV1",
    "alias_mutex",
    "read_aliases",
    "remove_alias",
    "resolve_model",
    "resolve_model_id",
    "set_alias",
    "validate_alias",
]

ALIAS_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
LOCAL_PREFIX = "local/"


class ModelAliasIndexV1(Record):
    schema_version: Literal["1"] = "1"
    aliases: dict[str, Sha256] = Field(default_factory=dict, description="alias -> model_id")


def validate_alias(alias: str) -> str:
    if not ALIAS_RE.match(alias):
        raise HitchError("local_model_alias_invalid", f"invalid alias {alias!r}", {"alias": alias})
    return alias


def alias_mutex(root: HitchRoot) -> FileLock:
    root.mutexes.mkdir(parents=True, exist_ok=True)
    return FileLock(str(root.mutexes / "model-aliases.lock"))


def _load(path: Path) -> ModelAliasIndexV1:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return ModelAliasIndexV1()
    except ValueError as exc:
        raise HitchError("local_model_integrity_failed", f"{path} is not valid JSON", {"file": str(path)}) from exc
    index = parse_record(ModelAliasIndexV1, data, "local_model_integrity_failed")
    bad = sorted(a for a in index.aliases if not ALIAS_RE.match(a))
    if bad:
        raise HitchError("local_model_integrity_failed", f"{path} holds invalid aliases", {"aliases": bad})
    return index


def read_aliases(root: HitchRoot) -> dict[str, str]:
    """alias -> model_id; an absent index is empty."""
    return dict(_load(root.aliases_file).aliases)


def set_alias(root: HitchRoot, alias: str, model_id: str, *, move: bool = True) -> str | None:
    """Point ``alias`` at ``model_id``; returns the model it pointed to before (or None). With ``move=False`` an
    alias that names another model is left as it is: ``local_model_alias_taken`` (``hitch models add`` without
    ``--force``)."""
    validate_alias(alias)
    with alias_mutex(root):
        index = _load(root.aliases_file)
        previous = index.aliases.get(alias)
        if previous is not None and previous != model_id and not move:
            raise HitchError(
                "local_model_alias_taken",
                f"alias {alias} points at {previous}; moving it to {model_id} needs --force",
                {"alias": alias, "from": previous, "to": model_id},
            )
        if previous != model_id:
            aliases = {**index.aliases, alias: model_id}
            atomic_write_json(root.aliases_file, ModelAliasIndexV1(aliases=dict(sorted(aliases.items()))).to_json_dict())
        return previous


def remove_alias(root: HitchRoot, alias: str) -> str:
    """Drop ``alias`` (the model stays in the store until ``models gc``); the model it named."""
    validate_alias(alias)
    with alias_mutex(root):
        index = _load(root.aliases_file)
        model_id = index.aliases.get(alias)
        if model_id is None:
            raise _not_found(f"local/{alias}", f"no model is aliased {alias!r}", _did_you_mean(root, alias))
        aliases = {a: m for a, m in index.aliases.items() if a != alias}
        atomic_write_json(root.aliases_file, ModelAliasIndexV1(aliases=aliases).to_json_dict())
        return model_id


def _did_you_mean(root: HitchRoot, name: str) -> str | None:
    """The known alias closest to ``name`` (a typo, or an alias given without ``local/``), as a reference."""
    known = read_aliases(root)
    if name in known:
        return LOCAL_PREFIX + name
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return LOCAL_PREFIX + close[0] if close else None


def _not_found(ref: str, message: str, suggestion: str | None) -> HitchError:
    details: dict[str, str] = {"ref": ref}
    if suggestion is not None:
        details["did_you_mean"] = suggestion
    return HitchError("local_model_not_found", message + (f" (did you mean {suggestion}?)" if suggestion else ""), details)


def resolve_model_id(root: HitchRoot, ref: str) -> str:
    """``local/ALIAS`` or ``local/sha256:<hex>`` -> model_id (not yet checked to be published)."""
    if not ref.startswith(LOCAL_PREFIX):
        near = _did_you_mean(root, ref) if ALIAS_RE.match(ref) else None
        raise _not_found(ref, f"{ref!r} is not a local model reference (local/ALIAS or local/sha256:<hex>)", near)
    name = ref[len(LOCAL_PREFIX) :]
    if name.startswith("sha256:"):
        if not is_sha256_id(name):
            raise HitchError("local_model_not_found", f"{name!r} is not a sha256:<64 hex> model id", {"ref": ref})
        return name
    validate_alias(name)
    model_id = read_aliases(root).get(name)
    if model_id is None:
        raise _not_found(ref, f"no model is aliased {name!r} ({ref})", _did_you_mean(root, name))
    return model_id


def resolve_model(root: HitchRoot, ref: str) -> LocalModelManifestV1:
    """The published manifest a ``local/...`` reference names."""
    return read_manifest(root, resolve_model_id(root, ref))
