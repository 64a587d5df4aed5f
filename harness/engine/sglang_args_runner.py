"""SGLang's own reading of our command lines: a standalone script run by an installed runtime's python.

Run as ``<runtime venv>/bin/python -P sglang_args_runner.py`` (``-P``: its own folder, which holds the
harness's ``sglang.py``, must not shadow the ``sglang`` package; never imported by the harness: it imports
``sglang``, which only the runtime's venv has). Reads one JSON request on stdin, writes one JSON result on
stdout::

    request: {"cases": [{"name": str, "argv": [flag, ...], "env": {NAME: value}}, ...],
              "resolve": bool, "secret_fields": [field, ...]}
    result:  {"versions": {"sglang", "python"}, "server_args_fields": [field, ...],
              "cases": [{"name", "unknown_flags", "dests", "error", "parsed", "resolved", "resolve_error",
                         "env"}, ...]}

Per case, with ``os.environ`` replaced by the case's ``env`` for its duration:

- ``unknown_flags``: every ``--flag`` of ``argv`` that is not exactly an option string of SGLang's parser
  (``ServerArgs.add_cli_args`` on an ``argparse.ArgumentParser``). argparse would accept an unambiguous
  prefix of a real flag as an abbreviation; such a flag is reported too, since a later SGLang adding a
  flag with the same prefix would make it ambiguous.
- ``dests``: flag → the ``argparse`` destination (the ServerArgs field) it sets.
- ``parsed``: the namespace SGLang's parser makes of ``argv`` after its ``--config FILE.yaml`` merge
  (``ConfigArgumentMerger``, as ``prepare_server_args`` does), or ``error`` with argparse's message.
  Constructing the record (``ServerArgs.from_cli_args``) resolves nothing and touches no device.
- ``resolved`` (when ``resolve``): what ``/server_info`` would echo: ``prepare_server_args(argv)``, then
  ``resolve_once()`` (SGLang's resolution pipeline, as ``launch_server`` runs it), then ``resolved_dict()``
  (what ``build_server_info`` publishes). Resolution reads the checkpoint's config and, for values the
  command line leaves open, the device's memory; a resolution that fails is ``resolve_error``.
- ``env``: for each ``SGLANG_*`` variable of the case's ``env``, whether SGLang's environment registry
  (``sglang.srt.environ.envs``) declares it and the value the registry reads from it.

``secret_fields`` (the engine keys the ``--config`` file carries) are never written out: their values are
replaced by ``sha256:<hex>`` of the value, so a caller can check them against the keys it holds.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import sys
from collections.abc import Iterator
from typing import Any


class _Refused(Exception):
    """argparse refused the command line (its message)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's contract: never returns
        raise _Refused(message)


def _plain(value: Any) -> Any:
    """A JSON value: scalars kept (so ints, floats and bools compare as parsed), containers walked, others str."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _hidden(fields: dict[str, Any], secret: list[str]) -> dict[str, Any]:
    out = {k: _plain(v) for k, v in fields.items()}
    for name in secret:
        value = out.get(name)
        if isinstance(value, str):
            out[name] = "sha256:" + hashlib.sha256(value.encode()).hexdigest()
    return out


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _parser() -> _Parser:
    from sglang.srt.server_args import ServerArgs

    parser = _Parser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def _flags(argv: list[str]) -> list[str]:
    return [tok.split("=", 1)[0] for tok in argv if tok.startswith("--")]


def _registry(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    from sglang.srt.environ import EnvField, Envs, envs

    out: dict[str, dict[str, Any]] = {}
    for name in sorted(n for n in env if n.startswith("SGLANG_")):
        declared = isinstance(vars(Envs).get(name), EnvField)
        out[name] = {"registered": declared, "value": _plain(getattr(envs, name).get()) if declared else None}
    return out


def _resolve(argv: list[str], secret: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            server_args = prepare_server_args(list(argv))
            server_args.resolve_once()
            resolved = server_args.resolved_dict()
    except SystemExit as exc:
        return None, f"exit {exc.code}: {err.getvalue().strip()[-2000:]}"
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"[:2000]
    return _hidden(resolved, secret), None


def _case(case: dict[str, Any], resolve: bool, secret: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    argv: list[str] = list(case["argv"])
    out: dict[str, Any] = {"name": case["name"], "unknown_flags": [], "dests": {}, "error": None, "parsed": None}
    out.update(resolved=None, resolve_error=None)
    with _environ(dict(case["env"])):
        parser = _parser()
        known = parser._option_string_actions
        flags = _flags(argv)
        out["unknown_flags"] = [f for f in flags if f not in known]
        out["dests"] = {f: known[f].dest for f in flags if f in known}
        out["env"] = _registry(dict(case["env"]))
        try:
            merged = ConfigArgumentMerger(parser).merge_config_with_args(argv)
            namespace, extra = parser.parse_known_args(merged)
            if extra:
                raise _Refused("unrecognized arguments: " + " ".join(extra))
            ServerArgs.from_cli_args(namespace)  # the record SGLang builds from it (resolves nothing)
        except (_Refused, ValueError) as exc:
            out["error"] = str(exc)
            return out
        out["parsed"] = _hidden(vars(namespace), secret)
        if resolve:
            out["resolved"], out["resolve_error"] = _resolve(argv, secret)
    return out


def main() -> int:
    request = json.loads(sys.stdin.read())
    import sglang
    from sglang.srt.arg_groups.arg_utils import record_fields
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import ServerArgs

    secret = list(request.get("secret_fields", []))
    with contextlib.redirect_stdout(sys.stderr):  # whatever SGLang prints never mixes into the result
        load_plugins()  # as launch_server does before it parses
        result = {
            "versions": {"sglang": sglang.__version__, "python": sys.version.split()[0]},
            "server_args_fields": [f.name for f in record_fields(ServerArgs)],
            "cases": [_case(case, bool(request.get("resolve")), secret) for case in request["cases"]],
        }
    sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
