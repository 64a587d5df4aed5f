"""`hitch models add|list|inspect|gc` as a user runs them: real processes, JSON validated."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.contracts.base import parse_record
from harness.contracts.model import LocalModelManifestV1
from harness.paths import HitchRoot
from harness.store import model_files_dir
from tests.harness.store.checkpoint_builder import write_checkpoint

# The models sub-app alone, so these tests do not depend on the other command groups.
_MAIN = "from harness.cli.models import app; app(prog_name='hitch models')"


def _hitch(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _MAIN, *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["schema_version"] == "1"
    return data


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


def test_add_list_inspect_json(tmp_path: Path, root: Path) -> None:
    ckpt = write_checkpoint(tmp_path / "ckpt")
    added = _hitch(root, "add", str(ckpt), "--name", "coder", "--json")
    assert added.returncode == 0, added.stderr
    assert added.stderr == ""  # no progress bar with --json
    out = _json(added)
    manifest = parse_record(LocalModelManifestV1, out["manifest"], "internal_error")
    assert out["model_id"] == manifest.model_id and out["alias"] == "coder" and out["previous_model_id"] is None

    listed = _json(_hitch(root, "list", "--json"))
    assert [(m["model_id"], m["aliases"]) for m in listed["models"]] == [(manifest.model_id, ["coder"])]

    for ref in ("local/coder", f"local/{manifest.model_id}"):
        inspected = _hitch(root, "inspect", ref, "--verify", "--json")
        assert inspected.returncode == 0, inspected.stderr
        data = _json(inspected)
        assert parse_record(LocalModelManifestV1, data["manifest"], "internal_error") == manifest
        assert data["verified"] is True and data["aliases"] == ["coder"]


def test_an_alias_moves_only_with_force_and_says_from_what_to_what(tmp_path: Path, root: Path) -> None:
    first = _json(_hitch(root, "add", str(write_checkpoint(tmp_path / "a", seed=1)), "--name", "coder", "--json"))
    other = str(write_checkpoint(tmp_path / "b", seed=2))
    refused = _hitch(root, "add", other, "--name", "coder", "--json")
    assert refused.returncode == 2, refused.stdout
    err = json.loads(refused.stdout)["error"]
    assert err["code"] == "local_model_alias_taken" and err["details"]["from"] == first["model_id"]
    assert err["details"]["to"] != first["model_id"] and "--force" in err["message"]
    assert _json(_hitch(root, "inspect", "local/coder", "--json"))["model_id"] == first["model_id"]  # not moved
    again = _hitch(root, "add", str(tmp_path / "a"), "--name", "coder")  # the same model again: nothing moves
    assert again.returncode == 0 and "moved" not in again.stdout
    proc = _hitch(root, "add", other, "--name", "coder", "--force")
    assert proc.returncode == 0, proc.stderr
    assert f"alias coder moved: {first['model_id']} -> {err['details']['to']}" in proc.stdout
    assert _json(_hitch(root, "inspect", "local/coder", "--json"))["model_id"] == err["details"]["to"]


def test_alias_rm_removes_the_alias_and_keeps_the_model(tmp_path: Path, root: Path) -> None:
    added = _json(_hitch(root, "add", str(write_checkpoint(tmp_path / "a", seed=1)), "--name", "coder", "--json"))
    typo = _hitch(root, "alias", "rm", "codr", "--json")
    assert typo.returncode == 2 and json.loads(typo.stdout)["error"]["details"]["did_you_mean"] == "local/coder"
    out = _json(_hitch(root, "alias", "rm", "local/coder", "--json"))
    assert out["alias"] == "coder" and out["model_id"] == added["model_id"]
    listed = _json(_hitch(root, "list", "--json"))["models"]
    assert [(m["model_id"], m["aliases"]) for m in listed] == [(added["model_id"], [])]
    gone = _hitch(root, "inspect", "local/coder", "--json")
    assert gone.returncode == 2 and json.loads(gone.stdout)["error"]["code"] == "local_model_not_found"


def test_list_has_a_header_and_human_sizes(tmp_path: Path, root: Path) -> None:
    _json(_hitch(root, "add", str(write_checkpoint(tmp_path / "a", seed=1)), "--name", "coder", "--json"))
    header, row = _hitch(root, "list").stdout.splitlines()
    assert header.split() == ["MODEL", "ALIASES", "ARCHITECTURE", "SIZE"]
    assert row.split()[1] == "coder" and row.split()[-1] in ("B", "kB", "MB", "GB")


def test_add_of_a_missing_directory_names_it(tmp_path: Path, root: Path) -> None:
    proc = _hitch(root, "add", str(tmp_path / "nope"), "--name", "x", "--json")
    assert proc.returncode == 2
    err = json.loads(proc.stdout)["error"]
    assert err["message"] == f"no such directory: {tmp_path / 'nope'}" and "disk" not in err["hint"]


def test_add_rejected_checkpoint_exit_code_and_json_error(tmp_path: Path, root: Path) -> None:
    ckpt = write_checkpoint(tmp_path / "ckpt")
    (ckpt / "pytorch_model.bin").write_bytes(b"pickle")
    proc = _hitch(root, "add", str(ckpt), "--name", "coder", "--json")
    assert proc.returncode == 2
    assert _json(proc)["error"]["code"] == "local_model_invalid"
    human = _hitch(root, "add", str(ckpt), "--name", "Bad Alias")
    assert human.returncode == 2 and "local_model_alias_invalid" in human.stderr
    assert not (root / "store" / "models").exists() or not any((root / "store" / "models").rglob("manifest.json"))


def test_inspect_unknown_and_tampered(tmp_path: Path, root: Path) -> None:
    unknown = _hitch(root, "inspect", "local/nope", "--json")
    assert unknown.returncode == 2 and _json(unknown)["error"]["code"] == "local_model_not_found"
    model_id = _json(_hitch(root, "add", str(write_checkpoint(tmp_path / "c")), "--name", "m", "--json"))["model_id"]
    config = model_files_dir(HitchRoot(root), model_id) / "config.json"
    os.chmod(config, stat.S_IRUSR | stat.S_IWUSR)
    config.write_text(config.read_text() + " ")
    assert _hitch(root, "inspect", "local/m", "--json").returncode == 0  # without --verify, no re-hash
    tampered = _hitch(root, "inspect", "local/m", "--verify", "--json")
    assert tampered.returncode == 3
    error = _json(tampered)["error"]
    assert error["code"] == "local_model_integrity_failed" and error["details"]["file"] == "config.json"


def test_gc_dry_run_then_apply(tmp_path: Path, root: Path) -> None:
    keep = _json(_hitch(root, "add", str(write_checkpoint(tmp_path / "k", seed=1)), "--name", "keep", "--json"))["model_id"]
    drop = _json(_hitch(root, "add", str(write_checkpoint(tmp_path / "d", seed=2)), "--name", "drop", "--json"))["model_id"]
    aliases = HitchRoot(root).aliases_file
    aliases.write_text(json.dumps({"schema_version": "1", "aliases": {"keep": keep}}))
    dry = _json(_hitch(root, "gc", "--dry-run", "--json"))
    assert dry["dry_run"] is True and dry["unreferenced_models"] == [drop] and dry["deleted"] == []
    assert model_files_dir(HitchRoot(root), drop).is_dir()
    applied = _json(_hitch(root, "gc", "--apply", "--json"))
    assert applied["dry_run"] is False and applied["deleted"] == [drop]
    assert not model_files_dir(HitchRoot(root), drop).exists()
    assert [m["model_id"] for m in _json(_hitch(root, "list", "--json"))["models"]] == [keep]
    both = _hitch(root, "gc", "--apply", "--dry-run", "--json")
    assert both.returncode == 2 and _json(both)["error"]["code"] == "usage_error"
