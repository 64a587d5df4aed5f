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


def test_add_human_output_reports_repointed_alias(tmp_path: Path, root: Path) -> None:
    first = _json(_hitch(root, "add", str(write_checkpoint(tmp_path / "a", seed=1)), "--name", "coder", "--json"))
    proc = _hitch(root, "add", str(write_checkpoint(tmp_path / "b", seed=2)), "--name", "coder")
    assert proc.returncode == 0, proc.stderr
    assert f"alias coder: {first['model_id']} -> sha256:" in proc.stdout


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
