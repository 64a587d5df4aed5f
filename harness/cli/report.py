"""``hitch report build``: write the HTML pages (matrix, run, load) from entries, results and locust CSVs.

The reports code lives in the ``reports`` package and is imported only when the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

app = typer.Typer(no_args_is_help=True, help="self-contained HTML reports")

DEFAULT_KEYS = Path(__file__).resolve().parents[2] / "catalog" / "keys"


def _load_results(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HitchError("report_input_invalid", f"cannot read results file {path}: {exc}", {"path": str(path)}) from exc
    if not isinstance(data, dict):
        raise HitchError("report_input_invalid", f"results file {path} is not a JSON object", {"path": str(path)})
    return data


@app.command("build")
@cli_command
def build(
    out: Annotated[Path, typer.Option("--out", help="directory the pages are written to")],
    entries: Annotated[Path | None, typer.Option("--entries", help="directory of signed *.dsse.json entries")] = None,
    keys: Annotated[Path, typer.Option("--keys", help="trusted public keys")] = DEFAULT_KEYS,
    results: Annotated[Path | None, typer.Option("--results", help="a run's results.json")] = None,
    load: Annotated[Path | None, typer.Option("--load", help="directory of locust CSV files")] = None,
    common: Common = COMMON,
) -> None:
    """Build the pages for whichever inputs are given; prints the paths written. Exits 2
    (report_input_invalid) when an entry was rejected: the pages are written and list each rejection."""
    # imported here: every `hitch` command loads this module, pandas (~0.4 s) only `hitch report` needs
    from reports.builder import build_load_page, build_matrix, build_run_page
    from reports.matrix import collect_entries

    as_json = common.as_json
    _ = common.hroot  # a --root that is not a directory is refused like everywhere else

    if entries is None and results is None and load is None:
        raise HitchError("report_input_invalid", "give at least one of --entries, --results, --load")
    pages: dict[str, str] = {}
    if entries is not None:
        matrix = build_matrix(entries, keys, out)
        pages["matrix"] = str(matrix)
        pages["compare"] = str(matrix.with_name("compare.html"))  # written beside it
    if results is not None:
        pages["run"] = str(build_run_page(_load_results(results), out))
    if load is not None:
        pages["load"] = str(build_load_page(load, out))
    rejected = collect_entries(entries, keys)[1] if entries is not None else []
    if rejected:
        raise HitchError(
            "report_input_invalid",
            f"{len(rejected)} entr{'y was' if len(rejected) == 1 else 'ies were'} rejected (the matrix page lists "
            f"{'it' if len(rejected) == 1 else 'them'}); the pages were written",
            {"rejected": [{"file": r.file, "code": r.code, "reason": r.reason} for r in rejected], "pages": pages},
        )
    emit(as_json, {"pages": pages}, "\n".join(f"{kind}: {path}" for kind, path in pages.items()))
