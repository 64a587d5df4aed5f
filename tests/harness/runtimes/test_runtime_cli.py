"""`hitch runtime list/show/install` as a user runs them (JSON and exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.errors import ERROR_TABLE
from tests.harness.runtimes.conftest import GENERIC

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    return subprocess.run([*HITCH, *args, "--root", str(root)], capture_output=True, text=True, timeout=120, env=env)


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["schema_version"] == "1"
    return data


def test_list_json_validates_every_runtime(tmp_path: Path) -> None:
    proc = _run(tmp_path, "runtime", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    data = _json(proc)
    manifests = [InferenceRuntimeManifestV1.model_validate(r) for r in data["runtimes"]]
    assert [m.name for m in manifests] == [
        "sglang-0.5.15.post1-cpu",
        "sglang-0.5.16-cuda",
        GENERIC,
        "sglang-0.5.23-cuda",
        "sglang-0.5.23-cpu-generic-oci",
    ]
    assert data["installed"] == []


def test_list_human_flags_unpinned_entries(tmp_path: Path) -> None:
    proc = _run(tmp_path, "runtime", "list")
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert "UNPINNED" in lines["sglang-0.5.16-cuda"]
    assert "not certifiable" in lines[GENERIC] and "not installed" in lines[GENERIC]


def test_show_by_name_and_by_id(tmp_path: Path) -> None:
    data = _json(_run(tmp_path, "runtime", "show", GENERIC, "--json"))
    manifest = InferenceRuntimeManifestV1.model_validate(data["runtime"])
    assert (data["installed"], data["install_dir"]) == (False, None)
    again = _json(_run(tmp_path, "runtime", "show", manifest.runtime_id, "--json"))
    assert again["runtime"] == data["runtime"]


def test_show_unknown_is_not_found(tmp_path: Path) -> None:
    proc = _run(tmp_path, "runtime", "show", "sglang-0.0.0-nope", "--json")
    assert proc.returncode == ERROR_TABLE["inference_runtime_not_found"].exit_code
    assert _json(proc)["error"]["code"] == "inference_runtime_not_found"


def test_install_of_unpinned_oci_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    proc = _run(root, "runtime", "install", "sglang-0.5.16-cuda", "--json")
    assert proc.returncode == ERROR_TABLE["inference_runtime_unpinned"].exit_code
    assert _json(proc)["error"]["code"] == "inference_runtime_unpinned"
    assert not (root / "store" / "inference-runtimes").exists()
