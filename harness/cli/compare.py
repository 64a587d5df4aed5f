"""``hitch run compare A B`` and ``hitch eval compare A B`` (spec §6.3; :mod:`harness.compare`).

Both print the conditions and the figures side by side (JSON with ``--json``), each figure decided ``same`` /
``differs`` / ``inconclusive`` against its margin (:mod:`harness.compare.decide`), and exit by the overall
verdict: 0 ``reproduced``, :data:`~harness.compare.figures.DIFFERS_EXIT_CODE` (10) ``differs``,
:data:`~harness.compare.figures.INCONCLUSIVE_EXIT_CODE` (11) ``inconclusive`` (printed with how many samples
would decide it). Two runs that are not comparable are refused (``runs_not_comparable``, naming the condition)
before any figure is read; a run compared with itself is refused (``comparison_with_itself``).

``--across-models``: a model comparison (spec §6.3): the model may differ, every other condition must match;
the figures' differences with their intervals and the per-task outcome changes, no verdict, exit 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.output import COMMON, Common, cli_command, emit
from harness.compare import DIFFERS_EXIT_CODE, INCONCLUSIVE_EXIT_CODE

if TYPE_CHECKING:  # a comparison imports its modules when it runs: `hitch run --help` loads none of them
    from harness.compare.figures import Figure
    from harness.compare.runs import Comparison
    from harness.paths import HitchRoot

__all__ = ["register_eval_compare", "register_run_compare"]


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _cell(side: dict[str, Any]) -> str:
    return f"{_num(side.get('estimate'))} [{_num(side.get('low'))}, {_num(side.get('high'))}] n={side.get('n')}"


def _row(f: Figure, *, verdict: bool) -> str:
    diff = f.difference
    delta = f" diff {_num(diff['estimate'])} [{_num(diff['low'])}, {_num(diff['high'])}]"
    margin = f" margin {_num(f.decision.margin)}" if f.decision is not None else ""
    end = f"  {f.verdict.upper()}" if verdict else ""
    return f"  {f.name:<26} {f.unit:<7} A {_cell(f.a):<34} B {_cell(f.b):<34}{delta}{margin if verdict else ''}{end}"


def _task(t: dict[str, Any]) -> str:
    def side(x: dict[str, Any] | None) -> str:
        return "-" if x is None else f"{x['solved']}/{x['trials']}"

    return f"  task {t['task']}: A {side(t['a'])} solved, B {side(t['b'])}{'  CHANGED' if t['changed'] else ''}"


def _human(c: Comparison) -> str:
    if c.across_models:
        head = f"{c.kind} {c.a} vs {c.b}: a model comparison (every condition but the model the same); no verdict"
        lines = [head, *(_row(f, verdict=False) for f in c.figures), *(_task(t) for t in c.tasks)]
        return "\n".join([*lines, *(f"  note: {n}" for n in c.notes)])
    lines = [f"{c.kind} {c.a} vs {c.b}: comparable ({', '.join(x.name for x in c.conditions)} the same)"]
    lines += [_row(f, verdict=True) for f in c.figures]
    lines += [_task(t) for t in c.tasks]
    lines += [f"  note: {n}" for n in c.notes]
    if c.verdict == "differs":
        verdict = f"DIFFERS beyond the margins (Holm over {len(c.figures)} figures): {', '.join(c.differences)}"
    elif c.verdict == "inconclusive":
        verdict = "INCONCLUSIVE: not decided; to decide it:\n" + "\n".join(f"  {t}" for t in c.to_decide())
    else:
        verdict = "REPRODUCED: every figure the same within its margin"
    return "\n".join([*lines, verdict])


def _emit(common: Common, kind: str, comparison: Comparison) -> None:
    emit(common.as_json, {"kind": kind, **comparison.to_json()}, _human(comparison))
    if comparison.verdict == "differs":
        raise typer.Exit(DIFFERS_EXIT_CODE)
    if comparison.verdict == "inconclusive":
        raise typer.Exit(INCONCLUSIVE_EXIT_CODE)


def _register(app: typer.Typer, kind: str, what: str, compare: Callable[[HitchRoot, str, str, bool], Comparison]) -> None:
    @app.command(
        "compare",
        help=f"two {what}s side by side under the strict conditions (model, inference id, hardware, cache), each figure "
        f"decided same/differs/inconclusive against its margin; exit 0 reproduced, {DIFFERS_EXIT_CODE} differs, "
        f"{INCONCLUSIVE_EXIT_CODE} inconclusive",
    )
    @cli_command
    def compare_cmd(
        a: Annotated[str, typer.Argument(help="the first id (the baseline, A)")],
        b: Annotated[str, typer.Argument(help="the second id (B)")],
        across_models: Annotated[
            bool,
            typer.Option(
                "--across-models",
                help="a model comparison: the model may differ, every other condition must match; figures with "
                "intervals and per-task outcome changes, no verdict",
            ),
        ] = False,
        common: Common = COMMON,
    ) -> None:
        _emit(common, kind, compare(common.hroot, a, b, across_models))


def _compare_runs(root: HitchRoot, a: str, b: str, across_models: bool) -> Comparison:
    from harness.compare.runs import compare_runs

    return compare_runs(root, a, b, across_models=across_models)


def _compare_evals(root: HitchRoot, a: str, b: str, across_models: bool) -> Comparison:
    from harness.compare.evals import compare_evals

    return compare_evals(root, a, b, across_models=across_models)


def register_run_compare(run_app: typer.Typer) -> None:
    _register(run_app, "run-compare", "run", _compare_runs)


def register_eval_compare(eval_app: typer.Typer) -> None:
    _register(eval_app, "eval-compare", "evaluation", _compare_evals)
