"""The ``hitch`` command: one typer app with a sub-app per area."""

from __future__ import annotations

import typer

from harness.cli import bench, catalog, daemon, fixtures, local, local_services, models, report, run, runtime, serve

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
run.register(app)


def main() -> None:
    app()
