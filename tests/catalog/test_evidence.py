"""The evidence store beside a signed entry: kept bytes, an index, re-hashed by `hitch catalog verify --evidence`.

Also: the predicate is one typed record — the published JSON Schema, the pydantic model and a signed
entry's predicate agree, and a predicate with a field the record does not know is refused at signing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from catalog.evidence import blob_path, read_index, store_blob, verify_evidence, write_index
from catalog.signing import (
    KeyPair,
    build_statement,
    load_entry,
    sign_envelope,
    subjects_from_predicate,
    verify_envelope,
    write_entry,
)
from harness.cli.app import app
from harness.contracts.certification import CertificationResultV1, EvidenceFileV1
from harness.errors import HitchError
from harness.schema_export import SCHEMA_DIR
from tests.catalog.support import make_predicate


def _store(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, dict[str, str]]:
    """An evidence dir holding ``files`` (<check>/<name> -> bytes) and the predicate's evidence map."""
    directory = tmp_path / "report" / "evidence"
    entries, mapping = [], {}
    for name, data in files.items():
        digest = store_blob(directory, data)
        entries.append(EvidenceFileV1(name=name, check=name.split("/", 1)[0], digest=digest, size=len(data)))
        mapping[name] = digest
    write_index(directory, entries)
    return directory, mapping


FILES = {
    "hardware.doctor.fingerprint/doctor.json": b'{"cpu": "x"}',
    "agents.codex.history_replay/replay-0.response.sse": b"event: response.created\ndata: {}\n\n",
    "protocol.chat.stream/same.txt": b'{"cpu": "x"}',  # same bytes as another file: one blob serves both
}


def test_blobs_are_content_addressed_and_indexed(tmp_path: Path) -> None:
    directory, mapping = _store(tmp_path, FILES)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        {"index.json", *(f"sha256-{d.removeprefix('sha256:')}" for d in mapping.values())}
    )
    for name, data in FILES.items():
        assert blob_path(directory, mapping[name]).read_bytes() == data
    index = read_index(directory.parent)  # the report dir works as well as its evidence/
    assert [f.name for f in index.files] == sorted(FILES)
    assert {f.name: f.size for f in index.files} == {k: len(v) for k, v in FILES.items()}
    assert store_blob(directory, FILES["hardware.doctor.fingerprint/doctor.json"]) == mapping["protocol.chat.stream/same.txt"]


def test_verify_passes_then_fails_on_one_flipped_byte_and_on_a_missing_file(tmp_path: Path) -> None:
    directory, mapping = _store(tmp_path, FILES)
    assert verify_evidence(mapping, directory) == 3
    victim = blob_path(directory, mapping["agents.codex.history_replay/replay-0.response.sse"])
    data = bytearray(victim.read_bytes())
    data[3] ^= 0x01
    victim.write_bytes(bytes(data))
    with pytest.raises(HitchError) as exc:
        verify_evidence(mapping, directory)
    assert exc.value.code == "catalog_evidence_invalid"
    assert exc.value.details["problems"] == [
        {"name": "agents.codex.history_replay/replay-0.response.sse", "digest": mapping[
            "agents.codex.history_replay/replay-0.response.sse"], "problem": "altered"}
    ]  # fmt: skip
    victim.unlink()
    with pytest.raises(HitchError) as exc:
        verify_evidence(mapping, directory)
    assert [p["problem"] for p in exc.value.details["problems"]] == ["missing"]


def _signed(tmp_path: Path, key: KeyPair, predicate: dict[str, Any]) -> Path:
    envelope = sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), key.private_key)
    return write_entry(envelope, tmp_path / "entries")


def test_catalog_verify_with_evidence_rehashes_every_file(tmp_path: Path, key: KeyPair) -> None:
    directory, mapping = _store(tmp_path, FILES)
    entry = _signed(tmp_path, key, {**make_predicate(), "evidence": mapping})
    runner = CliRunner()
    args = ["catalog", "verify", str(entry), "--keys", str(key.public_key.parent), "--root", str(tmp_path / "root"), "--json"]
    ok = runner.invoke(app, [*args, "--evidence", str(directory.parent)])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["evidence_verified"] == 3
    blob = blob_path(directory, mapping["hardware.doctor.fingerprint/doctor.json"])
    blob.write_bytes(blob.read_bytes() + b" ")
    bad = runner.invoke(app, [*args, "--evidence", str(directory)])
    assert bad.exit_code != 0
    error = json.loads(bad.stdout)["error"]
    assert error["code"] == "catalog_evidence_invalid"
    names = sorted(p["name"] for p in error["details"]["problems"])
    assert names == ["hardware.doctor.fingerprint/doctor.json", "protocol.chat.stream/same.txt"]
    plain = runner.invoke(app, args)  # without --evidence only the signature is verified
    assert plain.exit_code == 0 and json.loads(plain.stdout)["evidence_verified"] is None


def test_published_schema_pydantic_model_and_signed_entry_agree(tmp_path: Path, key: KeyPair) -> None:
    schema = json.loads((SCHEMA_DIR / "CertificationResultV1.schema.json").read_text())
    assert schema == CertificationResultV1.model_json_schema(mode="validation")
    predicate = make_predicate()
    entry = _signed(tmp_path, key, predicate)
    signed = verify_envelope(load_entry(entry), key.public_key.parent).predicate
    jsonschema.validate(signed, schema)
    assert CertificationResultV1.model_validate(signed).to_json_dict() == signed
    assert signed == CertificationResultV1.model_validate(predicate).to_json_dict()


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"started_by": "someone"}, "started_by"),  # a field the record does not know
        ({"level": "gold"}, "level"),
        ({"evidence": {"requests.jsonl": "sha256:" + "4" * 64}}, "evidence"),  # not named <check id>/<file>
        ({"checks": [{"id": "protocol.chat.stream", "status": "passed", "required": True}]}, "checks.0.duration_s"),
    ],
)
def test_a_predicate_that_is_not_the_record_is_refused(change: dict[str, Any], where: str, key: KeyPair) -> None:
    predicate = {**make_predicate(), **change}
    with pytest.raises(HitchError) as exc:
        build_statement(predicate, subjects_from_predicate(predicate))
    assert exc.value.code == "catalog_entry_invalid" and where in exc.value.message
