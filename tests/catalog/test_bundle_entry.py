"""``hitch bundle export ENTRY.dsse.json`` and ``hitch bundle verify`` of an entry (issue 30 item 4).

The entry is signed with a key made for the test over evidence kept as the certify plugin keeps it
(content-addressed blobs and an index beside the entry). Its bundle verifies offline against that key's public
directory; a changed evidence blob, an untrusted key, and an entry whose evidence is left out are refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from catalog.evidence import store_blob, write_index
from catalog.signing import build_statement, generate_key, sign_envelope, subjects_from_predicate, write_entry
from harness.cli.app import app
from harness.contracts.certification import EvidenceFileV1
from tests.catalog.support import make_predicate
from tests.harness.bundle_support import members_of, rewrite


def _cli(root: Path, *args: str, code: int = 0) -> dict[str, Any]:
    result = CliRunner().invoke(app, [*args, "--json", "--root", str(root)])
    assert result.exit_code == code, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path]:
    """(entry path, trusted public-key dir) of an entry with one evidence file."""
    report = tmp_path / "report"
    data = b'{"request": 1}\n'
    digest = store_blob(report / "evidence", data)
    name = "protocol.chat.stream/requests.jsonl"
    write_index(report / "evidence", [EvidenceFileV1(name=name, check="protocol.chat.stream", digest=digest, size=len(data))])
    predicate = {**make_predicate(), "evidence": {name: digest}}
    key = generate_key(tmp_path / "keys" / "signer.pem")
    entry = write_entry(sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), key.private_key), report)
    return entry, key.public_key.parent


def test_an_entry_bundle_verifies_offline_against_the_trusted_key(signed: tuple[Path, Path], tmp_path: Path) -> None:
    entry, keys = signed
    root, out = tmp_path / "root", tmp_path / "entry.tar"
    exported = _cli(root, "bundle", "export", str(entry), "--out", str(out))
    assert exported["manifest"]["kind"] == "entry" and exported["manifest"]["subject"] == entry.name
    assert exported["manifest"]["model_id"] == make_predicate()["model_id"]
    digest = json.loads((entry.parent / "evidence" / "index.json").read_text())["files"][0]["digest"]
    evidence = {p.removeprefix("entry/evidence/") for p in members_of(out) if p.startswith("entry/evidence/")}
    assert evidence == {"index.json", "sha256-" + digest.split(":")[1]}
    ok = _cli(root, "bundle", "verify", str(out), "--keys", str(keys))
    assert ok["verified"] and ok["entry"]["level"] == "contract" and ok["entry"]["evidence_verified"] == 1


def test_entry_bundle_refusals(signed: tuple[Path, Path], tmp_path: Path) -> None:
    entry, keys = signed
    root, out = tmp_path / "root", tmp_path / "entry.tar"
    _cli(root, "bundle", "export", str(entry), "--out", str(out))
    # not signed by a trusted key (the default trust is the checkout's catalog/keys)
    err = _cli(root, "bundle", "verify", str(out), code=3)["error"]
    assert err["code"] == "bundle_invalid" and "does not verify" in err["message"]
    # an evidence blob changed, the manifest rewritten to match: the signed predicate's digest catches it
    blob = next(n for n in members_of(out) if n.startswith("entry/evidence/sha256-"))
    rewrite(out, lambda m: m.__setitem__(blob, b'{"request": 2}\n'), fix_manifest=True)
    err = _cli(root, "bundle", "verify", str(out), "--keys", str(keys), code=3)["error"]
    assert err["code"] == "bundle_invalid" and "evidence" in err["message"]
    # the entry's evidence left out of the bundle
    for path in (entry.parent / "evidence").iterdir():
        path.unlink()
    bare = tmp_path / "bare.tar"
    _cli(root, "bundle", "export", str(entry), "--out", str(bare))
    err = _cli(root, "bundle", "verify", str(bare), "--keys", str(keys), code=3)["error"]
    assert err["code"] == "bundle_invalid" and "evidence" in err["message"]
    # not a tar at all
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar")
    assert _cli(root, "bundle", "verify", str(junk), code=3)["error"]["code"] == "bundle_invalid"
