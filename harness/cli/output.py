"""One way for every command to print: JSON (with ``schema_version``) or human text,
both from the same payload, and one way to turn a HitchError into output + exit code.

Secrets never pass through here: payloads hold references (paths), never tokens.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from harness.cli.options import check_inputs, grouped
from harness.errors import HitchError
from harness.paths import HitchRoot

__all__ = [
    "COMMON",
    "JSON_SCHEMA_VERSION",
    "Common",
    "JsonOpt",
    "RootOpt",
    "cli_command",
    "emit",
    "report_error",
]

JSON_SCHEMA_VERSION = "1"

JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output with schema_version")]
RootOpt = Annotated[
    Path | None,
    typer.Option("--root", help="HITCH_ROOT to use (default: $HITCH_ROOT or ~/.local/share/hitch)"),
]


@dataclass(frozen=True)
class Common:
    """``--json`` and ``--root``, which every command that reads a root takes: one parameter
    (``common: Common = COMMON``) that :func:`cli_command` shows to Typer as the two flags."""

    as_json: JsonOpt = False
    root: RootOpt = None

    @property
    def hroot(self) -> HitchRoot:
        """The root; one that exists and is not a directory is refused, naming where it came from."""
        root = HitchRoot.at(self.root)
        if root.path.exists() and not root.path.is_dir():
            given = "--root" if self.root is not None else "HITCH_ROOT"
            raise HitchError(
                "usage_error", f"{given} {root.path} is not a directory (a Hitch root is one)", {"root": str(root.path)}
            )
        return root


COMMON = Common()

P = ParamSpec("P")
R = TypeVar("R")


def emit(as_json: bool, payload: dict[str, Any], human: str | Callable[[], None] | None = None) -> None:
    """Print ``payload`` as JSON, or its human form (a string, or a callable that prints)."""
    if as_json:
        sys.stdout.write(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **payload}, indent=2, sort_keys=True))
        sys.stdout.write("\n")
        return
    if human is None:
        sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    elif callable(human):
        human()
    else:
        sys.stdout.write(human.rstrip("\n") + "\n")


def _wants_json(kwargs: dict[str, Any]) -> bool:
    flag = kwargs.get("as_json")
    return flag if isinstance(flag, bool) else "--json" in sys.argv[1:]


def cli_command(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command: an options dataclass parameter stands for its fields' flags (:func:`grouped`); the
    option values every command checks alike are checked first (:func:`harness.cli.options.check_inputs`), so a
    bad one starts nothing; a HitchError becomes JSON or human output and the table's exit code."""
    command = grouped(fn)

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            check_inputs(kwargs)
            return command(*args, **kwargs)
        except HitchError as exc:
            raise typer.Exit(report_error(exc, _wants_json(kwargs))) from None

    return wrapper


def report_error(exc: HitchError, as_json: bool) -> int:
    """Print ``exc`` (JSON on stdout, else its human form on stderr); the exit code its table row gives."""
    if as_json:
        sys.stdout.write(
            json.dumps({"schema_version": JSON_SCHEMA_VERSION, "error": exc.to_dict()}, indent=2, sort_keys=True) + "\n"
        )
    else:
        sys.stderr.write(exc.human() + "\n")
    return exc.exit_code
