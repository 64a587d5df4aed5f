"""The one environment a checkpoint's chat template renders in: that of transformers' ``apply_chat_template``.

SGLang renders chat prompts through transformers, so every piece of ours that must count or build the same
prompt bytes — the gateway's prompt sizing, the fake engine, the fixtures' renderer — renders here: jinja2's
``ImmutableSandboxedEnvironment`` with ``trim_blocks``/``lstrip_blocks`` and the ``loopcontrols``
extension, transformers' ``tojson`` (no HTML escaping, non-ASCII kept, keys in their given order) and its
``raise_exception``/``strftime_now`` globals. Jinja's own ``tojson`` escapes ``<>&'`` as ``\\u003c``…, which
changes the byte and token counts of any tool schema holding them.
"""

from __future__ import annotations

import json
import time
from typing import Any, NoReturn

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["HF_EXTENSIONS", "hf_environment", "hf_tojson", "raise_exception", "strftime_now"]

HF_EXTENSIONS = ["jinja2.ext.loopcontrols"]


def hf_tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """transformers' ``tojson`` override: no HTML escaping, non-ASCII kept, keys in their given order."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message: str) -> NoReturn:
    """The template's own refusal (``{{ raise_exception('...') }}``), as transformers raises it."""
    raise TemplateError(message)


def strftime_now(fmt: str) -> str:
    return time.strftime(fmt)


def hf_environment(*, with_globals: bool = True) -> ImmutableSandboxedEnvironment:
    """A fresh environment; ``with_globals=False`` leaves out the globals (for static template analysis)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=HF_EXTENSIONS)
    env.filters["tojson"] = hf_tojson
    if with_globals:
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
    return env
