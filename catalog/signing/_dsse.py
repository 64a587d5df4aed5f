"""DSSE envelopes (https://github.com/secure-systems-lab/dsse, protocol v1) around catalog statements.

Envelope: ``{"payload": base64(statement bytes), "payloadType": "application/vnd.in-toto+json",
"signatures": [{"keyid": hex, "sig": base64}]}``. The signature covers the pre-authentication encoding
``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` (lengths as ASCII decimal byte
counts), never the JSON of the envelope. The payload is the RFC 8785 canonical JSON of the statement, so
signing the same statement twice gives the same bytes; a verifier trusts the signed bytes as they are and
never re-serializes them, which is why a payload with its keys reordered no longer verifies.

Every defect on the verifying side is ``catalog_signature_invalid`` with a ``reason`` detail.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature

from catalog.signing._keys import key_id, load_private_key, load_trusted_keys
from catalog.signing._statement import check_statement, subjects_of
from harness.errors import HitchError
from harness.ids import canonical_json

__all__ = [
    "PAYLOAD_TYPE",
    "VerifiedEntry",
    "decode_statement_unverified",
    "pae",
    "payload_bytes",
    "sign_envelope",
    "verify_envelope",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
_BAD = "catalog_signature_invalid"
_URLSAFE_TO_STD = bytes.maketrans(b"-_", b"+/")


@dataclass(frozen=True)
class VerifiedEntry:
    """A statement whose signature verified against a trusted key."""

    keyid: str
    statement: dict[str, Any]
    predicate: dict[str, Any]

    @property
    def subjects(self) -> dict[str, str]:
        return subjects_of(self.statement)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def _fail(reason: str, **details: Any) -> HitchError:
    return HitchError(_BAD, f"entry does not verify: {reason}", {"reason": reason, **details})


def _b64decode(text: object, what: str) -> bytes:
    """DSSE allows standard or URL-safe base64; anything else (stray characters, bad padding) is a defect."""
    if not isinstance(text, str):
        raise _fail(f"{what} is not a base64 string")
    try:
        # URL-safe characters are mapped to the standard alphabet; strict mode refuses stray or excess padding
        raw = text.encode("ascii").translate(_URLSAFE_TO_STD)
        unpadded = raw.rstrip(b"=")
        decoded = binascii.a2b_base64(unpadded + b"=" * (-len(unpadded) % 4), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise _fail(f"{what} is not valid base64") from None
    # one encoding per byte string: padded or unpadded, nothing else (no excess padding, no stray bits)
    canonical = base64.b64encode(decoded)
    if raw not in (canonical, canonical.rstrip(b"=")):
        raise _fail(f"{what} is not valid base64")
    return decoded


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _parse_payload(payload: bytes) -> Any:
    try:
        return json.loads(payload.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _fail(f"payload is not JSON ({type(exc).__name__})") from None


def _envelope_parts(envelope: object) -> tuple[bytes, list[dict[str, Any]]]:
    if not isinstance(envelope, dict):
        raise _fail("envelope is not a JSON object")
    if set(envelope) != {"payload", "payloadType", "signatures"}:
        raise _fail("envelope must have exactly payload, payloadType and signatures")
    if envelope["payloadType"] != PAYLOAD_TYPE:
        raise _fail(f"payloadType must be {PAYLOAD_TYPE}", payload_type=str(envelope["payloadType"])[:200])
    payload = _b64decode(envelope["payload"], "payload")
    signatures = envelope["signatures"]
    if not isinstance(signatures, list) or not signatures:
        raise _fail("signatures must be a non-empty list")
    for sig in signatures:
        if not isinstance(sig, dict) or not isinstance(sig.get("keyid"), str) or not isinstance(sig.get("sig"), str):
            raise _fail("each signature needs a string keyid and sig")
    return payload, signatures


def payload_bytes(envelope: object) -> bytes:
    """The decoded payload of a well-formed envelope (signatures not checked)."""
    return _envelope_parts(envelope)[0]


def decode_statement_unverified(envelope: object) -> Any:
    """The payload's JSON without checking any signature: for naming files and showing rejected entries."""
    payload, _ = _envelope_parts(envelope)
    return _parse_payload(payload)


def sign_envelope(statement: dict[str, Any], private_key_path: Path) -> dict[str, Any]:
    """A DSSE envelope over the canonical JSON of ``statement``, signed with an Ed25519 key file."""
    check_statement(statement, "catalog_entry_invalid")
    private_key = load_private_key(private_key_path)
    payload = canonical_json(statement)
    signature = private_key.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": key_id(private_key.public_key()), "sig": base64.b64encode(signature).decode("ascii")}],
    }


def verify_envelope(envelope: dict[str, Any], keys_dir: Path | Sequence[Path]) -> VerifiedEntry:
    """Verify offline against the ``<keyid>.pub.pem`` files of ``keys_dir`` (one or several dirs).

    Accepted when at least one signature is by a trusted key and verifies; a signature that names a
    trusted key but does not verify rejects the envelope outright. Then the statement's shape is checked.
    """
    dirs = [keys_dir] if isinstance(keys_dir, Path) else list(keys_dir)
    payload, signatures = _envelope_parts(envelope)
    trusted = load_trusted_keys(dirs)
    if not trusted:
        raise _fail("no trusted keys", keys_dirs=[str(d) for d in dirs])
    message = pae(PAYLOAD_TYPE, payload)
    accepted: str | None = None
    for sig in signatures:
        public_key = trusted.get(sig["keyid"])
        if public_key is None:
            continue
        try:
            public_key.verify(_b64decode(sig["sig"], "signature"), message)
        except InvalidSignature:
            raise _fail("bad signature", keyid=sig["keyid"]) from None
        accepted = accepted or sig["keyid"]
    if accepted is None:
        keyids = sorted({str(s["keyid"])[:64] for s in signatures})
        raise _fail("signed by no trusted key", keyids=keyids, keys_dirs=[str(d) for d in dirs])
    statement = check_statement(_parse_payload(payload), _BAD)
    return VerifiedEntry(keyid=accepted, statement=statement, predicate=statement["predicate"])
