"""Engine keys in 0600 private files; the engine environment is an allow-list built from nothing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from harness.engine import engine_environment, issue_keys, load_keys
from tests.harness.engine.inputs import ServiceInputs


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_are_private_random_and_rotated(inputs: ServiceInputs) -> None:
    keys, files = issue_keys(inputs.root, "svc")
    assert _mode(files.api_key.parent) == 0o700
    for path in (files.api_key, files.admin_key, files.config):
        assert _mode(path) == 0o600
    assert files.api_key.read_text() == keys.api_key and files.admin_key.read_text() == keys.admin_key
    assert keys.api_key != keys.admin_key and len(keys.api_key) >= 40
    assert yaml.safe_load(files.config.read_text()) == {"api-key": keys.api_key, "admin-api-key": keys.admin_key}
    assert keys.api_key not in repr(keys) and keys.api_key not in str(keys)
    again, _ = issue_keys(inputs.root, "svc")
    assert set(again.values()).isdisjoint(keys.values())
    assert load_keys(inputs.root, "svc") == again


def test_environment_is_an_allow_list(inputs: ServiceInputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "OPENAI_API_KEY", "HTTPS_PROXY", "SGLANG_ENABLE_TORCH_COMPILE"):
        monkeypatch.setenv(name, "leak")
    env = engine_environment(inputs.lock, {"PYTHONPATH": "/shim", "PYTHONNOUSERSITE": "1"}, tmp_path / "home")
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": "/shim",
        "PYTHONNOUSERSITE": "1",
        "SGLANG_USE_CPU_ENGINE": "1",
        "OMP_NUM_THREADS": str(inputs.lock.execution.platform.cpu_threads),  # type: ignore[union-attr]
        "CUDA_VISIBLE_DEVICES": "",
        "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0",
        "HF_HUB_OFFLINE": "1",  # the engine never reaches a model hub
        "TRANSFORMERS_OFFLINE": "1",
    }
    assert _mode(tmp_path / "home") == 0o700
    assert "leak" not in env.values() and os.environ["HF_TOKEN"] == "leak"
