"""The ``hitch`` command: one typer app with a sub-app per area."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli import (
    bench,
    bundle,
    catalog,
    daemon,
    evals,
    fixtures,
    local,
    local_services,
    local_views,
    models,
    report,
    run,
    runtime,
    serve,
    version,
)
from harness.cli.output import report_error
from harness.errors import HitchError
from harness.settings import env_name

app = typer.Typer(no_args_is_help=True, help="Hitch local inference: certification and benchmark harness")
app.add_typer(models.app, name="models", help="content-addressed checkpoint store")
app.add_typer(runtime.app, name="runtime", help="pinned SGLang runtimes")
local_services.register(local.app)
local_views.register(local.app)
serve.register(local.app)
app.add_typer(local.app, name="local", help="locks, doctor and local services")
app.add_typer(daemon.app, name="daemon", help="the per-root daemon that owns engine services")
app.add_typer(fixtures.app, name="fixtures", help="test fixtures (tiny checkpoint)")
app.add_typer(bench.app, name="bench", help="benchmarks that print figures")
app.add_typer(report.app, name="report", help="self-contained HTML reports")
app.add_typer(catalog.app, name="catalog", help="signed catalog entries (DSSE, Ed25519)")
app.add_typer(evals.app, name="eval", help="agent evaluations on a local model (Harbor)")
app.add_typer(bundle.app, name="bundle", help="evidence bundles of runs, evaluations and entries")
run.register(app)
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
