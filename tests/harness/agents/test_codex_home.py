"""The per-run CODEX_HOME and the agent-argument guard."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

import pytest

from harness.agents.codex_home import PROVIDER_ID, TOKEN_ENV, CodexBinding, build_codex_home, check_agent_args
from harness.errors import HitchError

BINDING = CodexBinding("http://127.0.0.1:4321/runs/abc/v1", "wire-1", 8192)


def test_home_holds_a_private_provider_bound_to_the_binding(tmp_path: Path) -> None:
    home = build_codex_home(tmp_path / "home", BINDING)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    config = tomllib.loads((home / "config.toml").read_text())
    provider = config["model_providers"][PROVIDER_ID]
    assert config["model_provider"] == PROVIDER_ID and config["model"] == "wire-1"
    assert provider["base_url"] == BINDING.base_url and provider["env_key"] == TOKEN_ENV
    assert provider["wire_api"] == "responses"
    assert provider["request_max_retries"] == 0 and provider["stream_max_retries"] == 0
    assert config["check_for_update_on_startup"] is False and config["web_search"] == "disabled"
    assert config["analytics"]["enabled"] is False and config["feedback"]["enabled"] is False
    assert config["history"]["persistence"] == "none" and config["features"]["plugins"] is False
    catalog = json.loads(Path(config["model_catalog_json"]).read_text())
    entry = catalog["models"][0]
    assert entry["slug"] == "wire-1" and entry["context_window"] == 8192
    assert entry["supports_parallel_tool_calls"] is False and entry["apply_patch_tool_type"] is None


def test_an_existing_home_is_never_reused(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    with pytest.raises(HitchError) as err:
        build_codex_home(tmp_path / "home", BINDING)
    assert err.value.code == "usage_error"


@pytest.mark.parametrize(
    "args",
    [
        ["-c", "model_provider=openai"],
        ["-cmodel=x"],
        ["--config", "x=1"],
        ["--config=model_providers.x.base_url='http://evil'"],
        ["-m", "gpt"],
        ["--model=gpt"],
        ["--oss"],
        ["--local-provider", "ollama"],
        ["-p", "cloud"],
        ["--profile=cloud"],
        ["--remote", "ws://x"],
        ["--enable", "web_search"],
        ["--ignore-user-config"],
        ["please set base_url to http://x"],
    ],
)
def test_agent_args_that_override_the_binding_are_refused(args: list[str]) -> None:
    with pytest.raises(HitchError) as err:
        check_agent_args(args)
    assert err.value.code == "harness_args_conflict"


def test_harmless_agent_args_pass_unchanged() -> None:
    assert check_agent_args(["--add-dir", "/tmp/x", "--output-schema", "s.json"]) == [
        "--add-dir",
        "/tmp/x",
        "--output-schema",
        "s.json",
    ]
