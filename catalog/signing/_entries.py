"""Signed catalog entries on disk: one DSSE envelope per ``*.dsse.json`` file.

File names come from the (signed) predicate and the payload digest, so the same envelope always lands at
the same name: ``<runtime>-<model>-<profile>-<device>-<timestamp>-<payload12>.dsse.json`` where runtime
is the predicate's ``runtime_name`` (else the first 12 hex of ``runtime_id``), model the first 12 hex of
``model_id``, timestamp ``finished_at`` as ``YYYYMMDDTHHMMSSZ`` (omitted when absent) and payload12 the
first 12 hex of sha256(payload). Every part is reduced to ``[a-z0-9._]``.

Where entries live: the checkout's ``catalog/entries/`` (published) and ``<HITCH_ROOT>/catalog/entries/``
(written by local signing); :func:`scan_entries` reads both and says for each whether and why it verified.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from catalog.signing._dsse import decode_statement_unverified, payload_bytes, verify_envelope
from catalog.signing._keys import read_bounded
from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_bytes

__all__ = [
    "ENTRY_SUFFIX",
    "EntryCheck",
    "check_entry",
    "entry_file_name",
    "load_entry",
    "published_entries_dir",
    "root_entries_dir",
    "scan_entries",
    "write_entry",
]

ENTRY_SUFFIX = ".dsse.json"
_MAX_ENTRY_BYTES = 16 * 1024 * 1024
_UNSAFE = re.compile(r"[^a-z0-9._]+")


def published_entries_dir() -> Path:
    """The checkout's ``catalog/entries/``."""
    return Path(__file__).resolve().parents[1] / "entries"


def root_entries_dir(root: HitchRoot) -> Path:
    return root.catalog_entries


def load_entry(path: Path) -> dict[str, Any]:
    """The envelope JSON of an entry file (not yet verified)."""
    data = read_bounded(path, _MAX_ENTRY_BYTES, "catalog_signature_invalid", "entry")
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise HitchError(
            "catalog_signature_invalid", f"entry {path} is not JSON", {"path": str(path), "reason": "not JSON"}
        ) from None
    if not isinstance(value, dict):
        raise HitchError("catalog_signature_invalid", f"entry {path} is not a JSON object", {"path": str(path)})
    return value


def _part(value: object, fallback: str, limit: int = 40) -> str:
    text = _UNSAFE.sub("_", str(value).lower()).strip("._") if isinstance(value, str) else ""
    return (text[:limit] or fallback).strip("._") or fallback


def _short_digest(value: object) -> str:
    if isinstance(value, str):
        hex_part = value.removeprefix("sha256:")
        if re.fullmatch(r"[0-9a-f]{64}", hex_part):
            return hex_part[:12]
    return _part(value, "unknown", 24)


def _stamp(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def entry_file_name(envelope: dict[str, Any]) -> str:
    """The stable, filesystem-safe file name of ``envelope`` (see the module docstring)."""
    statement = decode_statement_unverified(envelope)
    predicate = statement.get("predicate") if isinstance(statement, dict) else None
    if not isinstance(predicate, dict):
        raise HitchError("catalog_entry_invalid", "envelope payload has no predicate object")
    payload_digest = hashlib.sha256(payload_bytes(envelope)).hexdigest()
    runtime = predicate.get("runtime_name") or _short_digest(predicate.get("runtime_id"))
    parts = [
        _part(runtime, "runtime"),
        _short_digest(predicate.get("model_id")),
        _part(predicate.get("profile"), "profile"),
        _part(predicate.get("device"), "device"),
    ]
    stamp = _stamp(predicate.get("finished_at"))
    if stamp:
        parts.append(stamp.lower())
    parts.append(payload_digest[:12])
    return "-".join(parts) + ENTRY_SUFFIX


def write_entry(envelope: dict[str, Any], directory: Path) -> Path:
    """Write ``envelope`` atomically into ``directory`` under :func:`entry_file_name`; returns the path."""
    path = directory / entry_file_name(envelope)
    data = (json.dumps(envelope, indent=2, sort_keys=True) + "\n").encode()
    try:
        atomic_write_bytes(path, data, mode=0o644)
    except OSError as exc:
        raise HitchError(
            "storage_write_failed", f"cannot write entry into {directory}: {exc.strerror}", {"dir": str(directory)}
        ) from None
    return path


@dataclass(frozen=True)
class EntryCheck:
    """One entry file and the verdict on it. ``predicate`` is set only when the signature verified;
    ``claimed`` holds what an unverified payload says about itself (for listing rejected entries)."""

    path: Path
    verified: bool
    reason: str | None
    keyid: str | None
    predicate: dict[str, Any] | None
    claimed: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        source = self.predicate if self.predicate is not None else self.claimed
        return {
            "path": str(self.path),
            "verified": self.verified,
            "reason": self.reason,
            "keyid": self.keyid,
            "level": source.get("level"),
            "runtime": source.get("runtime_name") or source.get("runtime_id"),
            "runtime_id": source.get("runtime_id"),
            "model_id": source.get("model_id"),
            "device": source.get("device"),
            "profile": source.get("profile"),
            "engine": source.get("engine"),
            "finished_at": source.get("finished_at"),
        }


def _claimed(envelope: object) -> dict[str, Any]:
    try:
        statement = decode_statement_unverified(envelope)
    except HitchError:
        return {}
    predicate = statement.get("predicate") if isinstance(statement, dict) else None
    if not isinstance(predicate, dict):
        return {}
    return {k: v for k, v in predicate.items() if isinstance(v, str)}


def check_entry(path: Path, keys_dir: Path | Sequence[Path]) -> EntryCheck:
    try:
        envelope = load_entry(path)
    except HitchError as exc:
        return EntryCheck(path, False, exc.message, None, None, {})
    try:
        verified = verify_envelope(envelope, keys_dir)
    except HitchError as exc:
        return EntryCheck(path, False, str(exc.details.get("reason") or exc.message), None, None, _claimed(envelope))
    return EntryCheck(path, True, None, verified.keyid, verified.predicate, _claimed(envelope))


def scan_entries(directories: Iterable[Path], keys_dir: Path | Sequence[Path]) -> list[EntryCheck]:
    """Every ``*.dsse.json`` under ``directories`` (missing ones are empty), each verified or told why not."""
    out: list[EntryCheck] = []
    seen: set[Path] = set()
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob(f"*{ENTRY_SUFFIX}")):
            resolved = path.resolve()
            if resolved not in seen:
                seen.add(resolved)
                out.append(check_entry(path, keys_dir))
    return out
