"""``hitch bench ...``: benchmark scripts that print figures (never timed tests).

The benchmarks drive the fake engine and real SGLang, so they live with the certification code;
the CLI runs them as a separate process rather than importing them into the runtime core.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="benchmarks (figures, not pass/fail)")


@app.command(
    "overhead",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="gateway vs direct vs bare reference proxy; extra options go to certify.bench_overhead (see --help there)",
)
def overhead(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option("--out", help="write the figures as JSON here")] = None,
    engine: Annotated[str, typer.Option("--engine", help="fake | sglang")] = "fake",
) -> None:
    argv = [sys.executable, "-m", "certify.bench_overhead", "--engine", engine, *ctx.args]
    if out is not None:
        argv += ["--out", str(out)]
    raise typer.Exit(subprocess.call(argv))
