"""Our DSSE envelopes against an independent implementation: securesystemslib 1.x (`dsse.Envelope`,
`SSlibKey`, `CryptoSigner`). Each side verifies what the other signed; tampering fails on both."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]  # documented 1.x API, re-exported without __all__

from catalog.signing import (
    PAYLOAD_TYPE,
    KeyPair,
    build_statement,
    load_public_key,
    sign_envelope,
    subjects_from_predicate,
    verify_envelope,
)
from harness.errors import HitchError
from harness.ids import canonical_json


def _sslib_key(key: KeyPair) -> SSlibKey:
    # keyid passed explicitly: ours is sha256(raw public key), sslib's default is a different digest
    return SSlibKey.from_crypto(load_public_key(key.public_key), keyid=key.keyid)


def test_envelope_we_sign_verifies_with_securesystemslib(predicate: dict[str, Any], key: KeyPair) -> None:
    envelope = sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), key.private_key)
    theirs = Envelope.from_dict(copy.deepcopy(envelope))
    assert theirs.payload_type == PAYLOAD_TYPE
    accepted = theirs.verify([_sslib_key(key)], 1)
    assert list(accepted) == [key.keyid]


def test_envelope_we_tampered_fails_securesystemslib_too(predicate: dict[str, Any], key: KeyPair) -> None:
    envelope = sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), key.private_key)
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[5] ^= 0x01
    envelope["payload"] = base64.b64encode(bytes(payload)).decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(copy.deepcopy(envelope)).verify([_sslib_key(key)], 1)


def _sslib_signed(predicate: dict[str, Any], key: KeyPair, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
    private_key = load_pem_private_key(key.private_key.read_bytes(), None)
    signer = CryptoSigner(private_key, _sslib_key(key))
    statement = build_statement(predicate, subjects_from_predicate(predicate))
    envelope = Envelope(canonical_json(statement), payload_type, {})
    envelope.sign(signer)
    data: dict[str, Any] = envelope.to_dict()
    return data


def test_envelope_securesystemslib_signs_verifies_with_ours(predicate: dict[str, Any], key: KeyPair) -> None:
    verified = verify_envelope(_sslib_signed(predicate, key), key.public_key.parent)
    assert verified.keyid == key.keyid
    assert verified.predicate == predicate


def test_securesystemslib_envelope_with_other_payload_type_is_refused(predicate: dict[str, Any], key: KeyPair) -> None:
    envelope = _sslib_signed(predicate, key, payload_type="application/json")
    with pytest.raises(HitchError) as info:
        verify_envelope(envelope, key.public_key.parent)
    assert info.value.code == "catalog_signature_invalid"


def test_securesystemslib_envelope_by_untrusted_key_is_refused(
    predicate: dict[str, Any], key: KeyPair, other_key: KeyPair, tmp_path: Path
) -> None:
    with pytest.raises(HitchError) as info:
        verify_envelope(_sslib_signed(predicate, other_key), key.public_key.parent)
    assert info.value.code == "catalog_signature_invalid"
