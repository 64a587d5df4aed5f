"""The ``hitch`` command: one typer app with a sub-app per area, each imported only when it is used.

``hitch --help`` lists the areas from :data:`GROUPS` (name and help) without importing them; ``hitch AREA ...``
imports that area's modules alone (:class:`LazyGroup`). ``main`` turns the parser's refusals into the same
``usage_error`` every command reports.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar

import typer
from typer.core import TyperGroup

from harness.cli import version
from harness.cli.output import report_error
from harness.errors import HitchError
from harness.settings import env_name


def _sub_app(module: str) -> Callable[[], typer.Typer]:
    def load() -> typer.Typer:
        sub: typer.Typer = importlib.import_module(f"harness.cli.{module}").app
        return sub

    return load


def _local_app() -> typer.Typer:
    from harness.cli import local, local_services, local_views, serve

    local_services.register(local.app)
    local_views.register(local.app)
    serve.register(local.app)
    return local.app


def _run_app() -> typer.Typer:
    from harness.cli import run

    holder = typer.Typer()
    run.register(holder)
    sub: typer.Typer = holder.registered_groups[0].typer_instance  # type: ignore[assignment]
    return sub


# name -> (help, the loader of its Typer app): the order `hitch --help` lists them in
GROUPS: dict[str, tuple[str, Callable[[], typer.Typer]]] = {
    "models": ("content-addressed checkpoint store; `models alias rm`", _sub_app("models")),
    "runtime": ("pinned SGLang runtimes", _sub_app("runtime")),
    "local": ("locks, doctor, local services, their status and logs", _local_app),
    "daemon": ("the per-root daemon that owns engine services", _sub_app("daemon")),
    "fixtures": ("test fixtures (tiny checkpoint, SmolLM2)", _sub_app("fixtures")),
    "bench": ("benchmarks that print figures", _sub_app("bench")),
    "report": ("self-contained HTML reports", _sub_app("report")),
    "catalog": ("signed catalog entries (DSSE, Ed25519)", _sub_app("catalog")),
    "eval": ("agent evaluations on a local model (Harbor)", _sub_app("evals")),
    "bundle": ("evidence bundles of runs, evaluations and entries", _sub_app("bundle")),
    "run": ("run a harness (model-call | codex) once on a local model; run list|show|cancel|verify|rerun|compare", _run_app),
}


class LazyGroup(TyperGroup):
    """The root group: :data:`GROUPS` are listed from their name and help, and built (their modules imported)
    only when a command line names one."""

    _loaded: ClassVar[dict[str, Any]] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        return [*GROUPS, *(name for name in super().list_commands(ctx) if name not in GROUPS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in GROUPS:
            return super().get_command(ctx, cmd_name)
        if cmd_name in self._loaded:
            return self._loaded[cmd_name]
        return TyperGroup(name=cmd_name, help=GROUPS[cmd_name][0])  # for listing: nothing imported

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, cmd, rest = super().resolve_command(ctx, args)
        if name in GROUPS:
            cmd = self.load(name)
        return name, cmd, rest

    def load(self, name: str) -> Any:
        if name not in self._loaded:
            help_text, loader = GROUPS[name]
            holder = typer.Typer()  # as a sub-app it stays a group even with one command (report build)
            holder.add_typer(loader(), name=name, help=help_text)
            self._loaded[name] = typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]
        return self._loaded[name]


app = typer.Typer(cls=LazyGroup, no_args_is_help=True, help="Hitch local inference: certification and benchmark harness")
app.command("version", help="the version, commit and schema versions (also: hitch --version)")(version.version_cmd)


def _version_flag(value: bool) -> None:
    if value:
        version.print_version()
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_version_flag, help="print the version, commit and schema versions"),
    ] = False,
) -> None:
    """Hitch local inference: certification and benchmark harness"""


def main() -> None:
    argv = sys.argv[1:]
    _root_from_argv(argv)
    try:
        code = app(standalone_mode=False, prog_name="hitch")
    except typer.Abort:
        sys.stderr.write("Aborted!\n")
        sys.exit(1)
    except Exception as exc:  # the parser's refusals: one error form (and code) with every other
        if not _parser_error(exc):
            raise
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:  # `hitch local`: the group's help
            sys.stderr.write(ctx.get_help() + "\n")
            sys.exit(2)
        sys.exit(report_error(_usage_error(exc, ctx), "--json" in argv))
    sys.exit(code if isinstance(code, int) else 0)


def _parser_error(exc: Exception) -> bool:
    """A refusal of the command-line parser (Click's ``ClickException``, vendored by newer Typer releases)."""
    return any(cls.__name__ == "ClickException" for cls in type(exc).__mro__) and hasattr(exc, "format_message")


def _usage_error(exc: Exception, ctx: Any) -> HitchError:
    """The parser's refusal (an unknown option, a missing argument, a value of the wrong type) as the table's
    ``usage_error``, naming the command so its ``--help`` is one step away."""
    command = str(ctx.command_path) if ctx is not None else "hitch"
    return HitchError("usage_error", str(exc.format_message()), {"command": command})  # type: ignore[attr-defined]


def _root_from_argv(argv: list[str]) -> None:
    """``--root R`` becomes this process's HITCH_ROOT before any command runs, so what reads the root without
    being handed it (the catalog's operator pins of ``hitch runtime pin``, a daemon started from here) agrees."""
    for i, arg in enumerate(argv):
        if arg == "--root" and i + 1 < len(argv):
            os.environ[env_name("root")] = str(Path(argv[i + 1]).expanduser().absolute())
        elif arg.startswith("--root="):
            os.environ[env_name("root")] = str(Path(arg.split("=", 1)[1]).expanduser().absolute())
