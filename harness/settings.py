"""Every environment variable hitch reads, declared once: its name, type, default and meaning.

:func:`settings` validates the process environment (or a given mapping: a child's environment) into one
frozen :class:`HitchSettings` each time it is called, so a test's ``monkeypatch.setenv`` or the CLI's
``--root`` is seen at once; an empty value counts as unset. A malformed value is a ``usage_error`` that
names the variable. No other module reads these variables from ``os.environ``: they ask :func:`settings`.
Where the product sets one for a child process (the CLI's ``--root``, the certify controller for its
xdist workers, a harness's run token), it names it with :func:`env_name`.

:func:`effective_settings` is what ``hitch local doctor --json`` prints: every variable with the value in
force (the default where it is unset) and where it came from; secrets are masked.

The ``HITCH_REQUIRE_<COMPONENT>`` flags are true for any value but ``0``: CI sets them so that a missing
component fails a test instead of skipping it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError

from harness.errors import HitchError

__all__ = ["COMPONENTS", "Component", "HitchSettings", "effective_settings", "env_name", "settings"]

Component = Literal["docker", "sglang", "sglang_image", "harbor", "codex", "chromium", "aiperf"]
COMPONENTS: tuple[Component, ...] = ("docker", "sglang", "sglang_image", "harbor", "codex", "chromium", "aiperf")


def _flag(value: object) -> object:
    return value not in ("", "0") if isinstance(value, str) else value


def _stream(value: object) -> object:
    return value != "0" if isinstance(value, str) else value


Flag = Annotated[bool, BeforeValidator(_flag)]


def _require(component: str) -> Any:
    return Field(
        False,
        alias=f"HITCH_REQUIRE_{component.upper()}",
        description=f"a missing {component} fails the tests and checks that need it instead of skipping them (CI)",
    )


class HitchSettings(BaseModel):
    """The environment hitch honours. Field aliases are the variables' names."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=False)

    # -- the product -----------------------------------------------------------------------------------
    root: Path | None = Field(
        None,
        alias="HITCH_ROOT",
        description="the root of every file hitch writes (--root beats it; default: $XDG_DATA_HOME/hitch)",
    )
    xdg_data_home: Path | None = Field(
        None, alias="XDG_DATA_HOME", description="the default root is $XDG_DATA_HOME/hitch (~/.local/share/hitch)"
    )
    xdg_runtime_dir: Path | None = Field(
        None,
        alias="XDG_RUNTIME_DIR",
        description="per-user runtime folder: a daemon socket too deep for its root, the GPU lease folder",
    )
    docker_host: str | None = Field(None, alias="DOCKER_HOST", description="the Docker engine (default: the local socket)")
    pyenv_root: Path | None = Field(None, alias="PYENV_ROOT", description="where Harbor's Python 3.12 is looked for")
    codex_prefix: Path | None = Field(
        None, alias="HITCH_CODEX_PREFIX", description="the pinned Codex CLI's install prefix (default: .tools/codex)"
    )
    simulated_nvml: Path | None = Field(
        None,
        alias="HITCH_SIMULATED_NVML",
        description="tests only: a JSON file of simulated GPUs instead of NVML (nothing it backs is certifiable)",
    )
    local_model_token: SecretStr | None = Field(
        None,
        alias="HITCH_LOCAL_MODEL_TOKEN",
        description="the run token a harness (model-call, Codex) sends to the gateway; set by `hitch run`, never logged",
    )
    # -- the certification session (set by the controlling pytest process for its xdist workers) -------
    certify_report_dir: Path | None = Field(
        None, alias="HITCH_CERTIFY_REPORT_DIR", description="the session's report folder, shared with its workers"
    )
    certify_session: str | None = Field(
        None, alias="HITCH_CERTIFY_SESSION", description="the session key shared by the controller and its workers"
    )
    # -- components that must be present (CI) ---------------------------------------------------------
    require_docker: Flag = _require("docker")
    require_sglang: Flag = _require("sglang")
    require_sglang_image: Flag = _require("sglang_image")
    require_harbor: Flag = _require("harbor")
    require_codex: Flag = _require("codex")
    require_chromium: Flag = _require("chromium")
    require_aiperf: Flag = _require("aiperf")
    # -- the locust file (`locust -f certify/load/locustfile.py`), one target -------------------------
    load_base_url: str | None = Field(
        None, alias="HITCH_LOAD_BASE_URL", description="locust: the target's base URL (ends in /v1)"
    )
    load_token_file: Path | None = Field(None, alias="HITCH_LOAD_TOKEN_FILE", description="locust: the 0600 file of its token")
    load_model: str | None = Field(None, alias="HITCH_LOAD_MODEL", description="locust: the model name to send")
    load_api: Literal["chat", "responses"] = Field("chat", alias="HITCH_LOAD_API", description="locust: chat | responses")
    load_stream: Annotated[bool, BeforeValidator(_stream)] = Field(
        True, alias="HITCH_LOAD_STREAM", description="locust: 1 (SSE) or 0"
    )
    load_max_tokens: int = Field(16, alias="HITCH_LOAD_MAX_TOKENS", description="locust: output budget per request")
    load_seed: int = Field(0, alias="HITCH_LOAD_SEED", description="locust: seed of each user's prompt sequence")
    load_name: str = Field("gateway", alias="HITCH_LOAD_NAME", description="locust: the target's label")
    # -- image builds -------------------------------------------------------------------------------------
    image_tmp: Path | None = Field(
        None, alias="HITCH_IMAGE_TMP", description="scratch folder of the SGLang image build (default: the system's)"
    )

    @property
    def hitch_root(self) -> Path:
        """The root in force without ``--root``: ``HITCH_ROOT``, else ``$XDG_DATA_HOME/hitch`` (``~/.local/share/hitch``)."""
        if self.root is not None:
            return self.root.expanduser().absolute()
        return (self.xdg_data_home or Path.home() / ".local" / "share") / "hitch"

    def requires(self, component: Component) -> bool:
        """Whether CI asked for ``component`` (``HITCH_REQUIRE_<COMPONENT>``): missing, it fails rather than skips."""
        return bool(getattr(self, f"require_{component}"))


_SECRETS = frozenset(name for name, f in HitchSettings.model_fields.items() if f.annotation == SecretStr | None)
_NAMES = {name: str(f.alias) for name, f in HitchSettings.model_fields.items()}


def env_name(field: str) -> str:
    """The variable behind ``field`` (``env_name("root") == "HITCH_ROOT"``)."""
    try:
        return _NAMES[field]
    except KeyError:
        raise HitchError("internal_error", f"no setting {field!r}", {}) from None


def settings(environ: Mapping[str, str] | None = None) -> HitchSettings:
    """The settings of ``environ`` (default: this process's environment), validated now."""
    env = os.environ if environ is None else environ
    given = {name: env[name] for name in _NAMES.values() if env.get(name)}
    try:
        return HitchSettings.model_validate(given)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        name = str(first["loc"][0]) if first["loc"] else "?"
        value = "***" if name in {_NAMES[s] for s in _SECRETS} else given.get(name)
        raise HitchError("usage_error", f"environment variable {name}={value!r}: {first['msg']}", {"variable": name}) from None


def effective_settings(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every declared variable: ``name``, ``value`` in force (secrets as ``***``), ``source``, ``secret``, ``help``."""
    current = settings(environ)
    env = os.environ if environ is None else environ
    out: list[dict[str, Any]] = []
    for field, info in HitchSettings.model_fields.items():
        name = _NAMES[field]
        value: Any = current.hitch_root if field == "root" else getattr(current, field)
        secret = field in _SECRETS
        if secret and value is not None:
            value = "***"
        elif isinstance(value, Path):
            value = str(value)
        source = "environment" if env.get(name) else "default"
        out.append({"name": name, "value": value, "source": source, "secret": secret, "help": info.description or ""})
    return out
