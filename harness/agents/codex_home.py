"""One isolated ``CODEX_HOME`` per run: a private provider bound to the run's gateway binding.

Owns :func:`build_codex_home` (writes ``config.toml`` and our own ``models.json`` model catalog entry into a
fresh private directory) and :func:`check_agent_args` (refuses user arguments that would replace the
provider, the endpoint, the model or the config). The user's ``~/.codex`` is never read: Codex only sees
the directory given as ``CODEX_HOME``, and the keys below are all accepted by ``--strict-config``
(reference: shared/reference/codex-cli-local-provider.md, measured on 0.171.0).

Config, key by key: the provider ``hitch_local`` (``base_url`` = the binding's gateway URL, ``env_key`` = the
run-token variable, ``wire_api = "responses"``, request and stream retries 0 so evidence shows every
request), update check, analytics, feedback, history, plugins, goals, apps, sub-agents and web search off.
Our model catalog entry names the wire model with its real context window, no reasoning levels, no
``apply_patch`` grammar tool, no parallel tool calls (the lock disables them) and short base instructions,
so the first request is ~9 KB instead of ~26 KB.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HitchError
from harness.paths import ensure_private_dir
from harness.settings import env_name

__all__ = [
    "PROVIDER_ID",
    "TOKEN_ENV",
    "CodexBinding",
    "build_codex_home",
    "check_agent_args",
    "model_catalog_entry",
    "render_config",
]

PROVIDER_ID = "hitch_local"
TOKEN_ENV = env_name("local_model_token")
BASE_INSTRUCTIONS = (
    "You are a coding agent running in a terminal on the user's machine. Use the exec_command tool to run "
    "shell commands: read files before changing them, make the requested change, then check the result. "
    "When the task is done, answer with a short summary of what you changed."
)


@dataclass(frozen=True)
class CodexBinding:
    """What the provider entry needs from the run's binding (never the token itself)."""

    base_url: str  # the gateway's OpenAI base for the run, ending in /v1
    wire_model: str
    context_window: int
    # SGLang 0.5.23 sends no event of a text answer until it ends while tools are declared: use the
    # lock's request timeout (the whole generation can be one silent gap).
    stream_idle_timeout_ms: int = 600_000


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    raise TypeError(f"unsupported TOML value {value!r}")


def _table(name: str | None, values: dict[str, Any]) -> str:
    lines = [f"[{name}]"] if name else []
    lines += [f"{key} = {_toml_value(val)}" for key, val in values.items()]
    return "\n".join(lines) + "\n"


def render_config(binding: CodexBinding, catalog_path: Path) -> str:
    """``config.toml`` text: every key is one ``--strict-config`` accepts in the pinned version."""
    top = {
        "model": binding.wire_model,
        "model_provider": PROVIDER_ID,
        "check_for_update_on_startup": False,
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "web_search": "disabled",
        "model_catalog_json": str(catalog_path),
    }
    provider = {
        "name": "Hitch local gateway",
        "base_url": binding.base_url,
        "env_key": TOKEN_ENV,
        "wire_api": "responses",
        "request_max_retries": 0,
        "stream_max_retries": 0,
        "stream_idle_timeout_ms": binding.stream_idle_timeout_ms,
        "requires_openai_auth": False,
        "supports_websockets": False,
    }
    parts = [
        _table(None, top),
        _table("analytics", {"enabled": False}),
        _table("feedback", {"enabled": False}),
        _table("history", {"persistence": "none"}),
        _table("features", {"plugins": False, "goals": False, "apps": False}),
        _table("agents", {"enabled": False}),
        _table(f"model_providers.{PROVIDER_ID}", provider),
    ]
    return "\n".join(parts)


def model_catalog_entry(binding: CodexBinding) -> dict[str, Any]:
    """Our own catalog entry for the wire model (Codex otherwise warns "model metadata not found").

    ``default_reasoning_level``, ``default_verbosity`` and ``web_search_tool_type`` are left out: 0.171.0
    refuses ``null`` for them (enum fields), and leaving them out means "none".
    """
    return {
        "slug": binding.wire_model,
        "display_name": binding.wire_model,
        "description": "Hitch local model (sealed inference lock)",
        "supported_reasoning_levels": [],
        "shell_type": "shell_command",
        "visibility": "list",
        "supported_in_api": True,
        "priority": 0,
        "availability_nux": None,
        "upgrade": None,
        "base_instructions": BASE_INSTRUCTIONS,
        "model_messages": None,
        "supports_reasoning_summaries": False,
        "default_reasoning_summary": "none",
        "support_verbosity": False,
        "apply_patch_tool_type": None,
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "supports_parallel_tool_calls": False,
        "supports_image_detail_original": False,
        "context_window": binding.context_window,
        "max_context_window": binding.context_window,
        "auto_compact_token_limit": None,
        "experimental_supported_tools": [],
        "input_modalities": ["text"],
        "prefer_websockets": False,
        "use_responses_lite": False,
        "supports_search_tool": False,
    }


def build_codex_home(home: Path, binding: CodexBinding) -> Path:
    """Write a fresh private CODEX_HOME at ``home`` (which must not exist yet); returns ``home``."""
    if home.exists():
        raise HitchError("usage_error", f"CODEX_HOME {home} already exists; every run gets a fresh one", {"home": str(home)})
    ensure_private_dir(home)
    catalog = home / "hitch-models.json"
    catalog.write_text(json.dumps({"models": [model_catalog_entry(binding)]}, indent=2) + "\n", encoding="utf-8")
    (home / "config.toml").write_text(render_config(binding, catalog), encoding="utf-8")
    return home


# Options that would change where requests go or what config is loaded (exact or "--opt=value").
_FORBIDDEN_OPTS = {
    "-c": "config override",
    "--config": "config override",
    "-m": "model",
    "--model": "model",
    "--oss": "provider",
    "--local-provider": "provider",
    "-p": "config profile",
    "--profile": "config profile",
    "--remote": "endpoint",
    "--remote-auth-token-env": "credential",
    "--enable": "feature flag",
    "--disable": "feature flag",
    "--ignore-user-config": "config",
    "--strict-config": "config",
}
_FORBIDDEN_WORDS = ("model_provider", "base_url", "model_providers", "openai_base_url", "env_key", "chatgpt_base_url")


def check_agent_args(agent_args: Sequence[str]) -> list[str]:
    """The user's extra ``codex exec`` arguments, or ``harness_args_conflict`` when one would override the
    binding (provider, endpoint, model, config, features). Nothing is dropped or reordered silently."""
    for arg in agent_args:
        opt = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if opt in _FORBIDDEN_OPTS or (arg.startswith("-c") and len(arg) > 2 and not arg.startswith("--")):
            what = _FORBIDDEN_OPTS.get(opt, "config override")
            raise HitchError(
                "harness_args_conflict",
                f"agent argument {opt!r} would override the run's {what}; the local binding decides it",
                {"argument": opt},
            )
        lowered = arg.lower()
        for word in _FORBIDDEN_WORDS:
            if word in lowered:
                raise HitchError(
                    "harness_args_conflict",
                    f"an agent argument mentions {word!r}; the provider and endpoint come from the binding",
                    {"argument_mentions": word},
                )
    return list(agent_args)
