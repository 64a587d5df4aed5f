"""The ``hitch`` command: one typer app with a sub-app per area."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
    models,
    report,
    run,
    runtime,
    serve,
)
from harness.settings import env_name

app = typer.Typer(no_args_is_help=True, help="Hitch local inference: certification and benchmark harness")
app.add_typer(models.app, name="models", help="content-addressed checkpoint store")
app.add_typer(runtime.app, name="runtime", help="pinned SGLang runtimes")
local_services.register(local.app)
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


def main() -> None:
    _root_from_argv(sys.argv[1:])
    app()


def _root_from_argv(argv: list[str]) -> None:
    """``--root R`` becomes this process's HITCH_ROOT before any command runs, so what reads the root without
    being handed it (the catalog's operator pins of ``hitch runtime pin``, a daemon started from here) agrees."""
    for i, arg in enumerate(argv):
        if arg == "--root" and i + 1 < len(argv):
            os.environ[env_name("root")] = str(Path(argv[i + 1]).expanduser().absolute())
        elif arg.startswith("--root="):
            os.environ[env_name("root")] = str(Path(arg.split("=", 1)[1]).expanduser().absolute())
