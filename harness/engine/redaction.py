"""The one redaction of engine secrets, for everything the engine says: its log (either launcher) and its
``/server_info`` (run evidence).

SGLang 0.5.23 logs its resolved arguments at start-up as a dict repr —
``server_args={'model_path': ..., 'api_key': '<key>', 'admin_api_key': '<key>', ...}`` — and other paths
print ``ServerArgs(... api_key='<key>' ...)`` or its ``launch_command`` (``--api-key <key>``). Three rules,
applied together:

- every value hitch knows to be secret (the epoch's keys, read from the launch's secret files) is replaced
  wherever it appears;
- a quoted value after a name that says "secret" (``api_key``, ``admin_api_key``, ``hf_token``,
  ``ssl_keyfile_password`` ...: a whole ``_``/``-``/``.`` part of the name is key, token, secret, password
  or credential) is replaced in ``name='v'``, ``'name': 'v'`` and ``"name": "v"`` forms, a bare one in
  the shell form ``NAME=v``;
- a secret flag's value (``--api-key v``, ``--admin-api-key=v``) is replaced.

:class:`LineRedactor` applies them to a byte stream a line at a time (a key is never split across two
writes); :func:`redact` applies them to a JSON-like value and also drops fields with secret names.

What run evidence keeps of ``/server_info`` is an allow-list of observations, never "everything but the secrets"
(spec, preamble: version, backend, dtype and KV dtype, attention and sampling backends, context, the actual token
pool, the concurrency; plus the served identity and the other values a lock fixes, so the evidence can be held
against the lock): :func:`observations` keeps :data:`SERVER_INFO_OBSERVATIONS` only, and redacts their values
too. A field SGLang adds later (or a secret under a name no rule knows) is not kept until it is named here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "REDACTED",
    "SERVER_INFO_OBSERVATIONS",
    "LineRedactor",
    "observations",
    "redact",
    "redact_text",
    "secret_name",
    "secret_values",
]

REDACTED = "<redacted>"
_MIN_SECRET_LEN = 16
_MAX_PENDING = 1 << 20
_SECRET_PARTS = frozenset({"key", "keys", "token", "secret", "secrets", "password", "credential", "credentials"})
_SECRET_FLAG = re.compile(r"(--(?:[A-Za-z0-9]+-)*(?:key|token|secret|password)(?:-[A-Za-z0-9]+)*)(=|\s+)\S+", re.IGNORECASE)
# name, then = or :, then a quoted value or a bare word; the name may itself be quoted (dict repr, JSON)
_NAMED_VALUE = re.compile(
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<nq>['"]?)(?P<sep>\s*[:=]\s*)"""
    r"""(?:(?P<q>['"])(?P<quoted>(?:\\.|(?!(?P=q)).)*)(?P=q)|(?P<bare>[^\s,)}\]'"]+))"""
)
_NOT_SECRET_BARE = frozenset({"None", "null", "True", "False", "true", "false", REDACTED})


def secret_name(name: object) -> bool:
    """Does a field or argument name say it holds a secret? (By whole parts: ``max_total_tokens`` does not.)"""
    return isinstance(name, str) and not _SECRET_PARTS.isdisjoint(re.split(r"[_\-.]", name.lower()))


def secret_values(files: dict[str, Path]) -> list[str]:
    """The secrets held in a launch's secret files: each ``name: value`` line's value, or a bare value, of at
    least 16 characters; longest first, so a key that contains another is replaced whole."""
    values: set[str] = set()
    for path in files.values():
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            value = line.split(":", 1)[1].strip() if ":" in line else line
            value = value.strip("'\"")
            if len(value) >= _MIN_SECRET_LEN:
                values.add(value)
    return sorted(values, key=len, reverse=True)


def _named(match: re.Match[str]) -> str:
    if not secret_name(match.group("name")):
        return match.group(0)
    head = match.group("name") + match.group("nq") + match.group("sep")
    if match.group("q") is not None:
        return f"{head}{match.group('q')}{REDACTED}{match.group('q')}"
    bare = match.group("bare")
    # a bare value only in the shell form NAME=value: in code (a traceback's ``token = Path(...)``) it is no secret
    if bare in _NOT_SECRET_BARE or match.group("sep") != "=" or match.group("nq"):
        return match.group(0)
    return head + REDACTED


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret, secret-named value and secret flag value replaced by ``<redacted>``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _SECRET_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _NAMED_VALUE.sub(_named, text)


def redact(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """A JSON-like value without fields whose names say secret, every string through :func:`redact_text`."""
    if isinstance(value, dict):
        return {k: redact(v, secrets) for k, v in value.items() if not secret_name(k)}
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value


class LineRedactor:
    """Redacts a byte stream (an engine's stdout/stderr) whole lines at a time.

    :meth:`feed` returns the redacted complete lines seen so far (a partial line waits for its end, up to
    1 MiB); :meth:`finish` returns the rest. Bytes that are not UTF-8 pass through unchanged.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets = tuple(s for s in secrets if s)
        self._pending = b""

    def _redact(self, data: bytes) -> bytes:
        return redact_text(data.decode("utf-8", "surrogateescape"), self._secrets).encode("utf-8", "surrogateescape")

    def feed(self, chunk: bytes) -> bytes:
        self._pending += chunk
        cut = self._pending.rfind(b"\n") + 1
        if cut == 0 and len(self._pending) < _MAX_PENDING:
            return b""
        cut = cut or len(self._pending)
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        return self._redact(ready)

    def finish(self) -> bytes:
        rest, self._pending = self._pending, b""
        return self._redact(rest) if rest else b""


# the /server_info fields run evidence keeps (SGLang 0.5.23 names): every one an observation, none a secret
SERVER_INFO_OBSERVATIONS = (
    "version",
    "model_path",
    "served_model_name",
    "device",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "load_format",
    "attention_backend",
    "sampling_backend",
    "context_length",
    "max_total_num_tokens",
    "max_running_requests",
    "max_queued_requests",
    "max_prefill_tokens",
    "chunked_prefill_size",
    "mem_fraction_static",
    "disable_radix_cache",
    "random_seed",
    "enable_deterministic_inference",
    "tool_call_parser",
    "reasoning_parser",
    "tp_size",
    "dp_size",
    "pp_size",
)


def observations(info: dict[str, Any], secrets: tuple[str, ...]) -> dict[str, Any]:
    """The allow-listed observations of a ``/server_info`` answer (those it reports), their values redacted."""
    kept = {name: info[name] for name in SERVER_INFO_OBSERVATIONS if name in info}
    out: dict[str, Any] = redact(kept, secrets)
    return out
