"""``hitch run rerun ID``: the same harness input on the same lock again, as a new run (spec §6.3).

The run must be finished with its sealed evidence intact (``hitch run verify``'s check; ``run_evidence_changed``
otherwise) and must have kept its harness input (``run_not_rerunnable``: a ``hitch local serve`` run, or one
refused before its harness ran). Its lock (the one its ref seals) must still be sealed in this root
(``inference_lock_mismatch``), and its model and runtime must be here by digest
(:func:`harness.lock_inputs.require_lock_inputs`: nothing is installed, pulled or substituted). The new run pins
that inference id with the same engine, launcher, image and capture, and its record names the run it reruns
(``rerun_of``); compare the two with ``hitch run compare``.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli import options as opt
from harness.cli.output import COMMON, Common, cli_command
from harness.errors import HitchError

__all__ = ["register"]

_CARRIED = ("image", "fake_flags", "capture_max_bytes")


def _verified_lock_id(hroot: Any, run_id: str) -> str:
    from harness.run_ref import read_ref, verify_run

    check = verify_run(hroot, run_id)
    if [c.what for c in check.changes] == ["unsealed"]:
        raise HitchError(
            "run_not_rerunnable", f"run {run_id} has no sealed evidence set: its lock is unknown", {"run_id": run_id}
        )
    if not check.ok:
        raise HitchError(
            "run_evidence_changed",
            f"run {run_id}'s evidence changed since it was sealed; it is not rerun",
            {"run_id": run_id, "changes": [c.to_json() for c in check.changes]},
        )
    return read_ref(hroot.runs / run_id).inference_id


def register(run_app: typer.Typer) -> None:
    @run_app.command("rerun", help="run a finished run's harness input again on its lock, as a new run (rerun_of)")
    @cli_command
    def rerun_cmd(
        run_id: Annotated[str, typer.Argument(help="the finished run to run again")],
        new_run_id: opt.NewRunId = None,
        common: Common = COMMON,
    ) -> None:
        from harness.agents.evidence import read_harness_input
        from harness.app.requests import RunRequest, parse_request
        from harness.app.run_store import RunStore
        from harness.cli.run_exec import HarnessInput, start_run, submission_of
        from harness.lock import load_sealed_lock
        from harness.lock_inputs import require_lock_inputs

        hroot = common.hroot
        record = RunStore(hroot).read(run_id)
        if record is None:
            raise HitchError("run_not_found", f"no run {run_id!r} in this root", {"run_id": run_id})
        if not record.terminal:
            raise HitchError("run_in_progress", f"run {run_id} is {record.status}; rerun a finished run", {"run_id": run_id})
        asked = read_harness_input(hroot, run_id)
        inference_id = _verified_lock_id(hroot, run_id)
        lock = load_sealed_lock(hroot, inference_id)  # inference_lock_mismatch when it is no longer sealed here
        request = record.request
        engine, launcher = str(request.get("engine", "sglang")), str(request.get("launcher", "process"))
        require_lock_inputs(hroot, lock.model_id, lock.runtime_id, engine, launcher)
        body: dict[str, Any] = {
            "inference_id": inference_id,
            "engine": engine,
            "launcher": launcher,
            "runtime": lock.runtime_id,
            "device": lock.execution.platform.backend,
            "run_id": new_run_id or "run-" + secrets.token_hex(8),
            "harness": asked["harness"],
            "capture": record.capture,
            "rerun_of": run_id,
        }
        body.update({k: request[k] for k in _CARRIED if k in request})
        workdir = asked.get("workdir")
        again = HarnessInput(
            asked["harness"], asked["prompt"], asked.get("max_output_tokens"), Path(workdir) if workdir else None,
            list(asked.get("agent_args") or []),
        )  # fmt: skip
        body["submission"] = submission_of(again.prompt, again.max_output_tokens, again.agent_args, again.workdir)
        start_run(hroot, parse_request(RunRequest, body), again, engine, common.as_json)
