"""`hitch catalog keygen|sign|verify|list|trust` through the typer app, in --json form."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness.cli.app import app
from tests.catalog.support import LOCK, MODEL, RUNTIME, make_predicate


class Cli:
    """Runs commands against one HITCH_ROOT and keeps every output, to scan it for key material."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.outputs: list[str] = []

    def run(self, *args: str, code: int = 0) -> dict[str, Any]:
        result = CliRunner().invoke(app, [*args, "--json", "--root", str(self.root)])
        self.outputs.append(result.output)
        assert result.exit_code == code, result.output
        data: dict[str, Any] = json.loads(result.stdout)
        assert data["schema_version"] == "1"
        return data


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "root")


@pytest.fixture
def predicate_file(tmp_path: Path) -> Path:
    path = tmp_path / "predicate.json"
    path.write_text(json.dumps(make_predicate()))
    return path


def _key_body(private_key: Path) -> str:
    lines = private_key.read_text().splitlines()
    return "".join(line for line in lines if not line.startswith("-----"))


def test_keygen_default_is_the_dev_key_0600_created_once(cli: Cli) -> None:
    first = cli.run("catalog", "keygen")
    private_key = Path(first["private_key"])
    assert first["created"] is True
    assert private_key == cli.root / "keys" / "dev-ed25519.pem"
    assert stat.S_IMODE(private_key.stat().st_mode) == 0o600
    assert Path(first["public_key"]).name == f"{first['keyid']}.pub.pem"
    again = cli.run("catalog", "keygen")
    assert again["created"] is False and again["keyid"] == first["keyid"]
    body = _key_body(private_key)
    assert all(body not in out and "PRIVATE KEY" not in out for out in cli.outputs)


def test_keygen_out_refuses_to_overwrite_without_force(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "ops" / "signer.pem"
    made = cli.run("catalog", "keygen", "--out", str(out))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    refused = cli.run("catalog", "keygen", "--out", str(out), code=2)
    assert refused["error"]["code"] == "catalog_key_invalid"
    replaced = cli.run("catalog", "keygen", "--out", str(out), "--force")
    assert replaced["keyid"] != made["keyid"]


def test_sign_verify_list_with_the_dev_key(cli: Cli, predicate_file: Path) -> None:
    signed = cli.run("catalog", "sign", str(predicate_file))
    entry = Path(signed["entry"])
    assert entry.parent == cli.root / "catalog" / "entries" and entry.is_file()
    assert signed["subjects"] == {"runtime": RUNTIME, "model": MODEL, "inference_lock": LOCK}
    assert signed["level"] == "contract"
    # the dev key is not trusted by default: catalog/keys does not hold it
    refused = cli.run("catalog", "verify", str(entry), code=3)
    assert refused["error"]["code"] == "catalog_signature_invalid"
    verified = cli.run("catalog", "verify", str(entry), "--keys", signed["public_keys_dir"])
    assert verified["verified"] is True and verified["keyid"] == signed["keyid"]
    assert verified["predicate"] == make_predicate()
    listed = cli.run("catalog", "list", str(entry.parent), "--keys", signed["public_keys_dir"])
    assert [(e["verified"], e["level"], e["device"], e["profile"]) for e in listed["entries"]] == [
        (True, "contract", "cpu", "baseline")
    ]
    body = _key_body(cli.root / "keys" / "dev-ed25519.pem")
    assert all(body not in out and "PRIVATE KEY" not in out for out in cli.outputs)


def test_list_shows_a_tampered_entry_as_rejected_with_why(cli: Cli, predicate_file: Path, tmp_path: Path) -> None:
    entries = tmp_path / "entries"
    good = Path(cli.run("catalog", "sign", str(predicate_file), "--out", str(entries))["entry"])
    envelope = json.loads(good.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["level"] = "certified"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    (entries / "forged.dsse.json").write_text(json.dumps(envelope))
    keys = str(cli.root / "keys" / "public")
    listed = cli.run("catalog", "list", str(entries), "--keys", keys)
    by_name = {Path(e["path"]).name: e for e in listed["entries"]}
    assert by_name[good.name]["verified"] is True
    forged = by_name["forged.dsse.json"]
    assert forged["verified"] is False and forged["reason"] == "bad signature"
    assert forged["level"] == "certified"  # what it claims, shown only as a rejected claim


def test_sign_with_explicit_subjects_key_and_a_statement_file(cli: Cli, predicate_file: Path, tmp_path: Path) -> None:
    key = cli.run("catalog", "keygen", "--out", str(tmp_path / "ops" / "k.pem"))
    signed = cli.run(
        "catalog",
        "sign",
        str(predicate_file),
        "--subject",
        f"model={MODEL}",
        "--key",
        key["private_key"],
        "--out",
        str(tmp_path / "e"),
    )
    assert signed["subjects"] == {"model": MODEL} and signed["keyid"] == key["keyid"]
    statement = json.loads(base64.b64decode(json.loads(Path(signed["entry"]).read_text())["payload"]))
    statement_file = tmp_path / "statement.json"
    statement_file.write_text(json.dumps(statement))
    again = cli.run("catalog", "sign", str(statement_file), "--key", key["private_key"], "--out", str(tmp_path / "e2"))
    assert Path(again["entry"]).read_bytes() == Path(signed["entry"]).read_bytes()  # canonical payload, deterministic Ed25519


@pytest.mark.parametrize("subject", ["model", "model=sha256:abc", f"model={RUNTIME}"])
def test_sign_refuses_bad_subjects(cli: Cli, predicate_file: Path, subject: str) -> None:
    refused = cli.run("catalog", "sign", str(predicate_file), "--subject", subject, code=2)
    assert refused["error"]["code"] == "catalog_entry_invalid"


def test_trust_copies_the_public_key_and_refuses_a_private_one(cli: Cli, predicate_file: Path, tmp_path: Path) -> None:
    key = cli.run("catalog", "keygen")
    signed = cli.run("catalog", "sign", str(predicate_file))
    trusted_dir = tmp_path / "trusted"
    trusted = cli.run("catalog", "trust", key["public_key"], "--keys", str(trusted_dir))
    assert trusted["keyid"] == key["keyid"] and Path(trusted["trusted"]).parent == trusted_dir
    assert cli.run("catalog", "verify", signed["entry"], "--keys", str(trusted_dir))["verified"] is True
    refused = cli.run("catalog", "trust", key["private_key"], "--keys", str(trusted_dir), code=2)
    assert refused["error"]["code"] == "catalog_key_invalid"
    assert [p.name for p in trusted_dir.iterdir()] == [f"{key['keyid']}.pub.pem"]
    body = _key_body(Path(key["private_key"]))
    assert all(body not in out and "PRIVATE KEY" not in out for out in cli.outputs)
