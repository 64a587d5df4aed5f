"""``hitch run verify ID``: re-hash a run's sealed evidence set and name what changed (:mod:`harness.run_ref`)."""

from __future__ import annotations

import typer

from harness.cli import options as opt
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

__all__ = ["register"]


def register(run_app: typer.Typer) -> None:
    @run_app.command("verify", help="re-hash the run's inference.ref.json and every file it names; name what changed")
    @cli_command
    def verify_cmd(run_id: opt.RunIdArg, common: Common = COMMON) -> None:
        from harness.run_ref import verify_run

        result = verify_run(common.hroot, run_id)
        if not result.ok:
            changes = [c.to_json() for c in result.changes]
            names = ", ".join(f"{c.path} ({c.what})" for c in result.changes)
            raise HitchError(
                "run_evidence_changed",
                f"run {run_id}: {names}",
                {"run_id": run_id, "ref_digest": result.ref_digest, "changes": changes},
            )
        human = f"run {run_id}: {len(result.checked)} file(s) match the sealed set {result.ref_digest}"
        emit(common.as_json, {"kind": "run-verify", **result.to_json()}, human)
