"""Canonical JSON (RFC 8785 via the ``rfc8785`` library) and sha256 identities.

Every identity in the product (model_id, runtime_id, inference_id, lock digests) is
``sha256:<64 hex>`` over the canonical JSON of a record.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import rfc8785

__all__ = ["SHA256_RE", "canonical_json", "digest_bytes", "digest_json", "is_sha256_id", "sha256_hex"]

SHA256_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical bytes of a JSON value (pydantic models must be dumped first)."""
    return rfc8785.dumps(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_bytes(data: bytes) -> str:
    return "sha256:" + sha256_hex(data)


def digest_json(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return digest_bytes(canonical_json(value))


def is_sha256_id(value: str) -> bool:
    return bool(SHA256_RE.match(value))
