"""Sign -> verify round trip and every tampering the verifier must refuse (catalog_signature_invalid)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from catalog.signing import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    PREDICATE_TYPES,
    STATEMENT_TYPE,
    KeyPair,
    build_statement,
    ensure_dev_key,
    load_entry,
    pae,
    public_keys_dir_for,
    sign_envelope,
    subjects_from_predicate,
    trusted_keys_dir,
    verify_envelope,
    write_entry,
)
from harness.contracts.certification import check_status
from harness.errors import HitchError
from harness.ids import canonical_json
from harness.paths import HitchRoot
from tests.catalog.support import LOCK, MODEL, RUNTIME, make_predicate, make_v2_predicate


def _signed(predicate: dict[str, Any], key: KeyPair) -> dict[str, Any]:
    return sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), key.private_key)


def _refused(envelope: Any, keys: Path | list[Path], reason_part: str) -> HitchError:
    with pytest.raises(HitchError) as info:
        verify_envelope(envelope, keys)
    assert info.value.code == "catalog_signature_invalid"
    assert reason_part in info.value.details["reason"]
    return info.value


def _payload(envelope: dict[str, Any]) -> bytes:
    return base64.b64decode(envelope["payload"])


def _with_payload(envelope: dict[str, Any], payload: bytes) -> dict[str, Any]:
    return {**envelope, "payload": base64.b64encode(payload).decode()}


def test_round_trip_gives_back_statement_predicate_and_keyid(predicate: dict[str, Any], key: KeyPair) -> None:
    envelope = _signed(predicate, key)
    assert envelope["payloadType"] == PAYLOAD_TYPE
    assert [s["keyid"] for s in envelope["signatures"]] == [key.keyid]
    verified = verify_envelope(envelope, key.public_key.parent)
    assert verified.keyid == key.keyid
    assert verified.predicate == predicate
    assert verified.statement["_type"] == STATEMENT_TYPE
    assert verified.statement["predicateType"] == PREDICATE_TYPE
    assert verified.subjects == {"runtime": RUNTIME, "model": MODEL, "inference_lock": LOCK}
    # the payload is the RFC 8785 canonical JSON of the statement: signing twice gives the same bytes
    assert _payload(envelope) == canonical_json(verified.statement)
    assert _payload(_signed(predicate, key)) == _payload(envelope)


def _signed_as_is(statement: dict[str, Any], key: KeyPair) -> dict[str, Any]:
    """A correct signature over ``statement`` exactly as given (as older code, or a forger with the key, wrote it)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    private_key = load_pem_private_key(key.private_key.read_bytes(), None)
    payload = canonical_json(statement)
    sig = private_key.sign(pae(PAYLOAD_TYPE, payload))  # type: ignore[union-attr,call-arg]
    return {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": key.keyid, "sig": base64.b64encode(sig).decode()}],
    }


def _statement(predicate: dict[str, Any], predicate_type: str) -> dict[str, Any]:
    subjects = [
        {"name": n, "digest": {"sha256": d.removeprefix("sha256:")}}
        for n, d in sorted(subjects_from_predicate(predicate).items())
    ]
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": predicate_type, "predicate": predicate}


def test_an_entry_signed_under_schema_2_still_verifies_and_reads_as_it_was_signed(key: KeyPair) -> None:
    old = make_v2_predicate()
    verified = verify_envelope(_signed_as_is(_statement(old, PREDICATE_TYPES["2"]), key), key.public_key.parent)
    assert verified.predicate == old
    assert verified.predicate["metrics"] == {"gateway_added_latency_ms": {"p50": 1.5, "p95": 3.25, "p99": 4.0}}


def test_an_entry_signed_under_schema_3_still_verifies_and_its_unshown_check_reads_not_applicable(key: KeyPair) -> None:
    old = make_predicate() | {"schema_version": "3"}
    old["checks"] = [{**old["checks"][0], "details": {"not_applicable": "random weights"}}]  # schema 3's way
    verified = verify_envelope(_signed_as_is(_statement(old, PREDICATE_TYPES["3"]), key), key.public_key.parent)
    assert verified.predicate == old and verified.statement["predicateType"].endswith("/v3")
    assert check_status(verified.predicate["checks"][0]) == "not_applicable"


def test_the_headline_s_meaning_is_bound_to_the_schema_version(predicate: dict[str, Any], key: KeyPair) -> None:
    """Schema 3's headline is the decided figure: a bare difference there, or a decided figure under schema 2,
    is refused; a predicateType that does not match the schema version does not verify."""
    assert predicate["schema_version"] == "4" and _signed(predicate, key)  # the decided figure signs
    legacy = {"p50": 33.9, "p95": -18.1, "p99": -63.6}
    for bad in (
        {**predicate, "metrics": {"gateway_added_latency_ms": legacy}},
        {**make_v2_predicate(), "metrics": predicate["metrics"]},
    ):
        with pytest.raises(HitchError) as info:
            _signed(bad, key)
        assert info.value.code == "catalog_entry_invalid" and "gateway_added_latency_ms" in info.value.message
    forged = _signed_as_is(_statement(predicate, PREDICATE_TYPES["2"]), key)
    _refused(forged, key.public_key.parent, "does not match schema_version 4")


def test_keyid_is_sha256_of_raw_public_key(key: KeyPair) -> None:
    import hashlib

    from cryptography.hazmat.primitives import serialization

    from catalog.signing import load_public_key

    raw = load_public_key(key.public_key).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert key.keyid == hashlib.sha256(raw).hexdigest()
    assert key.public_key.name == f"{key.keyid}.pub.pem"


def test_pae_matches_the_dsse_spec_example() -> None:
    # DSSE protocol.md test vector
    assert pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


@pytest.mark.parametrize("index", [0, 17, -1])
def test_flipped_byte_in_payload_fails(predicate: dict[str, Any], key: KeyPair, index: int) -> None:
    envelope = _signed(predicate, key)
    payload = bytearray(_payload(envelope))
    payload[index] ^= 0x01
    _refused(_with_payload(envelope, bytes(payload)), key.public_key.parent, "bad signature")


@pytest.mark.parametrize("index", [0, 31, 63])
def test_flipped_byte_in_signature_fails(predicate: dict[str, Any], key: KeyPair, index: int) -> None:
    envelope = _signed(predicate, key)
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[index] ^= 0x80
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    _refused(envelope, key.public_key.parent, "bad signature")


def test_wrong_key_fails(predicate: dict[str, Any], key: KeyPair, other_key: KeyPair) -> None:
    envelope = _signed(predicate, key)
    _refused(envelope, other_key.public_key.parent, "signed by no trusted key")


def test_signature_claiming_a_trusted_keyid_but_made_by_another_key_fails(
    predicate: dict[str, Any], key: KeyPair, other_key: KeyPair
) -> None:
    envelope = _signed(predicate, other_key)
    envelope["signatures"][0]["keyid"] = key.keyid
    _refused(envelope, key.public_key.parent, "bad signature")


def test_edited_level_reencoded_without_resigning_fails(predicate: dict[str, Any], key: KeyPair) -> None:
    envelope = _signed(predicate, key)
    statement = json.loads(_payload(envelope))
    assert statement["predicate"]["level"] == "contract"
    statement["predicate"]["level"] = "certified"
    _refused(_with_payload(envelope, canonical_json(statement)), key.public_key.parent, "bad signature")


def test_reordered_payload_same_json_fails(predicate: dict[str, Any], key: KeyPair) -> None:
    envelope = _signed(predicate, key)
    original = _payload(envelope)
    statement = json.loads(original)
    reordered = json.dumps(dict(reversed(list(statement.items()))), separators=(",", ":")).encode()
    assert json.loads(reordered) == statement and reordered != original
    _refused(_with_payload(envelope, reordered), key.public_key.parent, "bad signature")


def test_wrong_payload_type_fails(predicate: dict[str, Any], key: KeyPair) -> None:
    envelope = {**_signed(predicate, key), "payloadType": "application/json"}
    _refused(envelope, key.public_key.parent, "payloadType")


@pytest.mark.parametrize("bad", ["not base64!", "YWJj=", 42])
def test_bad_base64_payload_fails(predicate: dict[str, Any], key: KeyPair, bad: Any) -> None:
    envelope = {**_signed(predicate, key), "payload": bad}
    _refused(envelope, key.public_key.parent, "base64")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e.pop("signatures"),
        lambda e: e.update(signatures=[]),
        lambda e: e.update(signatures=[{"sig": e["signatures"][0]["sig"]}]),
        lambda e: e.update(extra="field"),
    ],
    ids=["no-signatures", "empty-signatures", "no-keyid", "unknown-field"],
)
def test_malformed_envelope_fails(predicate: dict[str, Any], key: KeyPair, mutate: Any) -> None:
    envelope = _signed(predicate, key)
    mutate(envelope)
    _refused(envelope, key.public_key.parent, "")


def test_validly_signed_but_malformed_statement_fails(tmp_path: Path, key: KeyPair) -> None:
    # a correct signature over something that is not a certification statement is still refused
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    private_key = load_pem_private_key(key.private_key.read_bytes(), None)
    payload = canonical_json({"_type": STATEMENT_TYPE, "subject": [], "predicateType": PREDICATE_TYPE, "predicate": {}})
    sig = private_key.sign(pae(PAYLOAD_TYPE, payload))  # type: ignore[union-attr,call-arg]
    envelope = {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": key.keyid, "sig": base64.b64encode(sig).decode()}],
    }
    _refused(envelope, key.public_key.parent, "subject")


def test_no_trusted_keys_fails(predicate: dict[str, Any], key: KeyPair, tmp_path: Path) -> None:
    _refused(_signed(predicate, key), tmp_path / "empty", "no trusted keys")


@pytest.mark.parametrize(
    ("predicate_patch", "subjects"),
    [
        ({"level": "gold"}, None),
        ({"checks": [{"status": "passed"}]}, None),
        ({}, {}),
        ({}, {"model": "sha256:abc"}),
        ({}, {"model": "sha256:" + "5" * 64}),  # disagrees with predicate.model_id
    ],
    ids=["unknown-level", "check-without-id", "no-subjects", "short-digest", "subject-mismatch"],
)
def test_build_statement_refuses_what_could_never_verify(
    predicate: dict[str, Any], predicate_patch: dict[str, Any], subjects: dict[str, str] | None
) -> None:
    with pytest.raises(HitchError) as info:
        build_statement({**predicate, **predicate_patch}, subjects_from_predicate(predicate) if subjects is None else subjects)
    assert info.value.code == "catalog_entry_invalid"


def test_write_entry_is_stable_and_loads_back(predicate: dict[str, Any], key: KeyPair, tmp_path: Path) -> None:
    envelope = _signed(predicate, key)
    path = write_entry(envelope, tmp_path / "entries")
    assert path.name.startswith("sglang_0.5.23_cpu_generic-222222222222-baseline-cpu-20261130t004000z-")
    assert path.name.endswith(".dsse.json")
    assert write_entry(envelope, tmp_path / "entries") == path
    assert [p.name for p in (tmp_path / "entries").iterdir()] == [path.name]
    assert verify_envelope(load_entry(path), key.public_key.parent).predicate == predicate


def test_load_entry_refuses_non_json(tmp_path: Path) -> None:
    bad = tmp_path / "x.dsse.json"
    bad.write_text("{not json")
    with pytest.raises(HitchError) as info:
        load_entry(bad)
    assert info.value.code == "catalog_signature_invalid"


def test_dev_key_is_private_created_once_and_exports_public_half(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    path = ensure_dev_key(root)
    assert path == root.keys / "dev-ed25519.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    first = path.read_bytes()
    assert ensure_dev_key(root) == path and path.read_bytes() == first
    public = list(public_keys_dir_for(path).glob("*.pub.pem"))
    assert len(public) == 1 and b"PRIVATE" not in public[0].read_bytes()


def test_group_readable_private_key_is_refused(predicate: dict[str, Any], key: KeyPair) -> None:
    os.chmod(key.private_key, 0o644)
    with pytest.raises(HitchError) as info:
        _signed(predicate, key)
    assert info.value.code == "catalog_key_invalid"
    assert "BEGIN" not in info.value.message


def test_non_ed25519_key_is_refused(predicate: dict[str, Any], tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = tmp_path / "ec.pem"
    path.write_bytes(pem)
    os.chmod(path, 0o600)
    with pytest.raises(HitchError) as info:
        sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), path)
    assert info.value.code == "catalog_key_invalid"


def test_trusted_keys_dir_is_the_checkouts_catalog_keys_and_holds_no_private_key() -> None:
    keys_dir = trusted_keys_dir()
    assert keys_dir == Path(__file__).resolve().parents[2] / "catalog" / "keys"
    for path in keys_dir.iterdir():
        assert b"PRIVATE KEY" not in path.read_bytes()


def test_dev_keys_dir_holds_the_dev_keys_public_half_and_verifies_its_entries(predicate: dict[str, Any], tmp_path: Path) -> None:
    from catalog.signing import dev_keys_dir

    root = HitchRoot(tmp_path / "root")
    envelope = sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), ensure_dev_key(root))
    assert dev_keys_dir(root) == root.keys / "public"
    assert verify_envelope(envelope, [trusted_keys_dir(), dev_keys_dir(root)]).predicate == predicate


def test_subjects_from_predicate_skips_identities_a_failed_run_never_had(predicate: dict[str, Any]) -> None:
    assert subjects_from_predicate({**predicate, "inference_id": "", "runtime_id": "none"}) == {"model": MODEL}
