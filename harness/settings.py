"""Every environment variable hitch reads, declared once: its name, type, default and meaning.

:func:`settings` parses the process environment (or a given mapping: a child's environment) into one frozen
:class:`HitchSettings` each time it is called, so a test's ``monkeypatch.setenv`` or the CLI's ``--root`` is seen
at once; an empty value counts as unset. A malformed value is a ``usage_error`` that names the variable. No
other module reads these variables from ``os.environ``: they ask :func:`settings`. Where the product sets one
for a child process (the CLI's ``--root``, the certify controller for its xdist workers, a harness's run
token), it names it with :func:`env_name`.

Each field of :class:`HitchSettings` carries its variable (:class:`Var`: name, parser, help); the table is read
from the fields, so a variable is declared in one place. The loader is a plain dataclass, not a pydantic model:
every process imports it through :mod:`harness.paths`, and it costs nothing to build.

:func:`effective_settings` is what ``hitch local doctor`` prints: every variable with the value in force (the
default where it is unset) and where it came from; secrets are masked. The ``HITCH_REQUIRE_<COMPONENT>`` flags
are true for any value but ``0``: CI sets them so that a missing component fails a test instead of skipping it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from harness.errors import HitchError

__all__ = [
    "COMPONENTS",
    "Component",
    "HitchSettings",
    "Secret",
    "Var",
    "declared",
    "effective_settings",
    "env_name",
    "settings",
]

Component = Literal["docker", "sglang", "sglang_image", "harbor", "codex", "chromium", "aiperf", "nginx"]
COMPONENTS: tuple[Component, ...] = ("docker", "sglang", "sglang_image", "harbor", "codex", "chromium", "aiperf", "nginx")
LoadApi = Literal["chat", "responses"]


class Secret:
    """A secret value: never in a repr, a log line or an error; :meth:`reveal` hands it to who sends it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


@dataclass(frozen=True)
class Var:
    """One environment variable: its name, how its text is parsed, what it means."""

    name: str
    parse: Callable[[str], object]
    help: str
    secret: bool = False


def _path(text: str) -> Path:
    return Path(text)


def _text(text: str) -> str:
    return text


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("is not an integer") from None


def _flag(text: str) -> bool:
    return text != "0"


def _load_api(text: str) -> LoadApi:
    if text == "chat":
        return "chat"
    if text == "responses":
        return "responses"
    raise ValueError("is chat or responses")


def _var(name: str, parse: Callable[[str], object], help: str, secret: bool = False) -> dict[str, Var]:
    """A field's metadata: the variable behind it."""
    return {"var": Var(name, parse, help, secret)}


def _require(component: str) -> dict[str, Var]:
    what = f"a missing {component} fails the tests and checks that need it instead of skipping them (CI)"
    return _var(f"HITCH_REQUIRE_{component.upper()}", _flag, what)


@dataclass(frozen=True)
class HitchSettings:
    """The environment hitch honours (each field's variable: ``declared()``)."""

    # -- the product -----------------------------------------------------------------------------------
    root: Path | None = field(
        default=None, metadata=_var("HITCH_ROOT", _path, "the root of every file hitch writes (--root beats it)")
    )
    xdg_data_home: Path | None = field(
        default=None, metadata=_var("XDG_DATA_HOME", _path, "the default root is $XDG_DATA_HOME/hitch (~/.local/share/hitch)")
    )
    xdg_runtime_dir: Path | None = field(
        default=None,
        metadata=_var(
            "XDG_RUNTIME_DIR", _path, "per-user runtime folder: a daemon socket too deep for its root, the GPU lease folder"
        ),
    )
    docker_host: str | None = field(
        default=None, metadata=_var("DOCKER_HOST", _text, "the Docker engine (default: the local socket)")
    )
    pyenv_root: Path | None = field(default=None, metadata=_var("PYENV_ROOT", _path, "where Harbor's Python 3.12 is looked for"))
    codex_prefix: Path | None = field(
        default=None, metadata=_var("HITCH_CODEX_PREFIX", _path, "the pinned Codex CLI's install prefix (default: .tools/codex)")
    )
    simulated_nvml: Path | None = field(
        default=None,
        metadata=_var(
            "HITCH_SIMULATED_NVML", _path, "tests only: a JSON file of simulated GPUs instead of NVML (never certifiable)"
        ),
    )
    local_model_token: Secret | None = field(
        default=None,
        metadata=_var(
            "HITCH_LOCAL_MODEL_TOKEN",
            Secret,
            "the run token a harness (model-call, Codex) sends to the gateway; set by `hitch run`, never logged",
            secret=True,
        ),
    )
    # -- the certification session (set by the controlling pytest process for its xdist workers) -------
    certify_report_dir: Path | None = field(
        default=None, metadata=_var("HITCH_CERTIFY_REPORT_DIR", _path, "the session's report folder, for its workers")
    )
    certify_session: str | None = field(
        default=None, metadata=_var("HITCH_CERTIFY_SESSION", _text, "the session key the controller shares with its workers")
    )
    certify_quiet_load: str | None = field(
        default=None,
        metadata=_var(
            "HITCH_CERTIFY_QUIET_LOAD",
            _text,
            "the quiet phase's limit when --quiet-load is not given: auto, off or a number of busy cores",
        ),
    )
    # -- components that must be present (CI) ---------------------------------------------------------
    require_docker: bool = field(default=False, metadata=_require("docker"))
    require_sglang: bool = field(default=False, metadata=_require("sglang"))
    require_sglang_image: bool = field(default=False, metadata=_require("sglang_image"))
    require_harbor: bool = field(default=False, metadata=_require("harbor"))
    require_codex: bool = field(default=False, metadata=_require("codex"))
    require_chromium: bool = field(default=False, metadata=_require("chromium"))
    require_aiperf: bool = field(default=False, metadata=_require("aiperf"))
    require_nginx: bool = field(default=False, metadata=_require("nginx"))
    # -- the locust file (`locust -f certify/load/locustfile.py`), one target -------------------------
    load_base_url: str | None = field(
        default=None, metadata=_var("HITCH_LOAD_BASE_URL", _text, "locust: the target's base URL (ends in /v1)")
    )
    load_token_file: Path | None = field(
        default=None, metadata=_var("HITCH_LOAD_TOKEN_FILE", _path, "locust: the 0600 file of the target's token")
    )
    load_model: str | None = field(default=None, metadata=_var("HITCH_LOAD_MODEL", _text, "locust: the model name to send"))
    load_api: LoadApi = field(default="chat", metadata=_var("HITCH_LOAD_API", _load_api, "locust: chat | responses"))
    load_stream: bool = field(default=True, metadata=_var("HITCH_LOAD_STREAM", _flag, "locust: 1 (SSE) or 0"))
    load_max_tokens: int = field(default=16, metadata=_var("HITCH_LOAD_MAX_TOKENS", _int, "locust: output budget per request"))
    load_seed: int = field(default=0, metadata=_var("HITCH_LOAD_SEED", _int, "locust: seed of each user's prompt sequence"))
    load_name: str = field(default="gateway", metadata=_var("HITCH_LOAD_NAME", _text, "locust: the target's label"))
    # -- image builds -------------------------------------------------------------------------------------
    image_tmp: Path | None = field(
        default=None, metadata=_var("HITCH_IMAGE_TMP", _path, "scratch folder of the SGLang image build (default: the system's)")
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


_FIELDS: dict[str, Var] = {f.name: cast(Var, f.metadata["var"]) for f in dataclasses.fields(HitchSettings)}


def declared() -> dict[str, Var]:
    """Field name → its variable, in declaration order."""
    return dict(_FIELDS)


def env_name(field_name: str) -> str:
    """The variable behind ``field_name`` (``env_name("root") == "HITCH_ROOT"``)."""
    try:
        return _FIELDS[field_name].name
    except KeyError:
        raise HitchError("internal_error", f"no setting {field_name!r}", {}) from None


def settings(environ: Mapping[str, str] | None = None) -> HitchSettings:
    """The settings of ``environ`` (default: this process's environment), parsed now."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name, var in _FIELDS.items():
        text = env.get(var.name)
        if not text:
            continue
        try:
            values[name] = var.parse(text)
        except ValueError as exc:
            shown = "***" if var.secret else repr(text)
            raise HitchError("usage_error", f"environment variable {var.name}={shown}: {exc}", {"variable": var.name}) from None
    return HitchSettings(**values)  # type: ignore[arg-type]  # each value comes from its field's own parser


def effective_settings(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every declared variable: ``name``, ``value`` in force (secrets as ``***``), ``source``, ``secret``, ``help``."""
    current = settings(environ)
    env = os.environ if environ is None else environ
    out: list[dict[str, Any]] = []
    for name, var in _FIELDS.items():
        value: Any = current.hitch_root if name == "root" else getattr(current, name)
        if var.secret and value is not None:
            value = "***"
        elif isinstance(value, Path):
            value = str(value)
        source = "environment" if env.get(var.name) else "default"
        out.append({"name": var.name, "value": value, "source": source, "secret": var.secret, "help": var.help})
    return out
