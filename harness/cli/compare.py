"""``hitch run compare A B`` and ``hitch eval compare A B`` (spec §6.3; :mod:`harness.compare`).

Both print the conditions and the figures side by side (JSON with ``--json``) and exit 0 when nothing differs
beyond noise, :data:`~harness.compare.DIFFERS_EXIT_CODE` when something does; two runs that are not comparable
are refused (``runs_not_comparable``, naming the condition) before any figure is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from harness.cli.output import COMMON, Common, cli_command, emit
from harness.compare.evals import compare_evals
from harness.compare.figures import DIFFERS_EXIT_CODE, Figure
from harness.compare.runs import Comparison, compare_runs
from harness.paths import HitchRoot

__all__ = ["register_eval_compare", "register_run_compare"]


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _cell(side: dict[str, Any]) -> str:
    return f"{_num(side.get('estimate'))} [{_num(side.get('low'))}, {_num(side.get('high'))}] n={side.get('n')}"


def _row(f: Figure) -> str:
    diff = f.difference
    delta = f" diff {_num(diff['estimate'])} [{_num(diff['low'])}, {_num(diff['high'])}]" if diff else ""
    return f"  {f.name:<26} {f.unit:<7} A {_cell(f.a):<34} B {_cell(f.b):<34}{delta}  {f.verdict.upper()}"


def _human(c: Comparison) -> str:
    lines = [f"{c.kind} {c.a} vs {c.b}: comparable ({', '.join(x.name for x in c.conditions)} the same)"]
    lines += [_row(f) for f in c.figures]
    lines += [f"  note: {n}" for n in c.notes]
    verdict = f"DIFFERS beyond noise: {', '.join(c.differences)}" if c.differs else "no difference beyond noise"
    return "\n".join([*lines, verdict])


def _emit(common: Common, kind: str, comparison: Comparison) -> None:
    emit(common.as_json, {"kind": kind, **comparison.to_json()}, _human(comparison))
    if comparison.differs:
        raise typer.Exit(DIFFERS_EXIT_CODE)


def _register(app: typer.Typer, kind: str, what: str, compare: Callable[[HitchRoot, str, str], Comparison]) -> None:
    @app.command(
        "compare",
        help=f"two {what}s side by side under the strict conditions (model, inference id, hardware, cache); "
        f"exit {DIFFERS_EXIT_CODE} when a figure differs beyond noise",
    )
    @cli_command
    def compare_cmd(
        a: Annotated[str, typer.Argument(help="the first id (the baseline, A)")],
        b: Annotated[str, typer.Argument(help="the second id (B)")],
        common: Common = COMMON,
    ) -> None:
        _emit(common, kind, compare(common.hroot, a, b))


def _compare_runs(root: HitchRoot, a: str, b: str) -> Comparison:
    return compare_runs(root, a, b)


def _compare_evals(root: HitchRoot, a: str, b: str) -> Comparison:
    return compare_evals(root, a, b)


def register_run_compare(run_app: typer.Typer) -> None:
    _register(run_app, "run-compare", "run", _compare_runs)


def register_eval_compare(eval_app: typer.Typer) -> None:
    _register(eval_app, "eval-compare", "evaluation", _compare_evals)
