"""``hitch run --harness model-call|codex --model local/ALIAS ...``, ``hitch run cancel ID``, ``hitch run show ID``.

The run, step by step (spec §10.4): check the choices (:func:`harness.app.runs.run_service_request`:
``--inference sha256:...`` pins a prepared identity, then ``--device`` and ``--profile`` are refused;
``--offline`` never installs and fails with the commands to run first); a ``--run-id`` that already finished
answers its record and nothing runs again when the request is the same (the same digest of harness, lock or
its inputs, prompt, budget, capture, ...: :mod:`harness.app.run_identity`), and is ``run_conflict`` when it is
not; start the root's daemon if needed and create the run through it (``runs/<id>/run.json`` goes ``admitted →
preparing → running``; the service is acquired with the run as lease owner and the run is registered on the
daemon's gateway with its ``--capture`` mode); check the harness's compatibility profile for the lock (Codex:
a certified profile must exist, and the lock must claim what Codex always sends for the fields it fixes,
``parallel_tool_calls``; ``inference_harness_unsupported`` otherwise, before anything starts); run the harness with the run
token in its private environment; then, however it ended (an error, Ctrl-C), write the harness's evidence and
tell the daemon the terminal status and code (:func:`harness.app.runs.end_run`) — it revokes the binding,
releases the lease and writes the execution evidence. When the daemon died meanwhile, its next start ends the
run ``interrupted``.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import options as opt
from harness.cli import run_rerun, run_sealed, run_views
from harness.cli.compare import register_run_compare
from harness.cli.output import COMMON, Common, cli_command
from harness.errors import HitchError

if TYPE_CHECKING:
    from harness.paths import HitchRoot

__all__ = ["register"]

_DEADLINE_HELP = (
    "the run's deadline (seconds from its first model request): each request's timeout is "
    "min(time left, the lock's request timeout); once spent, inference_deadline_exceeded"
)


def _cancelled_record(hroot: HitchRoot, run_id: str) -> dict[str, Any]:
    from harness.cli.run_exec import cancelled_record

    return cancelled_record(hroot, run_id)


# `run cancel ID` answers the record the daemon kept; `run show ID` and `run list`: harness.cli.run_views
_RECORD_COMMANDS: tuple[tuple[str, str, Callable[[HitchRoot, str], dict[str, Any]]], ...] = (
    ("cancel", "cancel a live run: binding revoked, requests in flight ended, lease released", _cancelled_record),
)


def _add_record_command(
    run_app: typer.Typer, name: str, help_text: str, record_of: Callable[[HitchRoot, str], dict[str, Any]]
) -> None:
    @run_app.command(name, help=help_text)
    @cli_command
    def record_cmd(run_id: opt.RunIdArg, common: Common = COMMON) -> None:
        from harness.cli.run_exec import emit_record

        hroot = common.hroot
        emit_record(common.as_json, hroot, record_of(hroot, run_id))


def register(app: typer.Typer) -> None:
    run_app = typer.Typer(
        invoke_without_command=True,
        no_args_is_help=False,
        help="run a harness (model-call | codex) once on a local model, with evidence under runs/; `run list`, "
        "`run show ID`, `run cancel ID`",
    )
    app.add_typer(run_app, name="run")

    for name, help_text, record_of in _RECORD_COMMANDS:
        _add_record_command(run_app, name, help_text, record_of)
    run_views.register(run_app)
    run_sealed.register(run_app)
    run_rerun.register(run_app)
    register_run_compare(run_app)

    @run_app.callback()
    @cli_command
    def run_cmd(
        ctx: typer.Context,
        harness: Annotated[str | None, typer.Option("--harness", help="model-call | codex")] = None,
        prompt: Annotated[
            str | None, typer.Option("--prompt", help="the prompt (model-call: text or the JSON input list)")
        ] = None,
        model: opt.Model = None,
        inference: opt.Inference = None,
        svc: opt.ServiceOptions = opt.DEFAULT_SERVICE,
        offline: opt.Offline = False,
        max_output_tokens: Annotated[int | None, typer.Option("--max-output-tokens", help="<= the lock's")] = None,
        workdir: Annotated[Path | None, typer.Option("--workdir", help="codex: the agent's working directory")] = None,
        agent_arg: Annotated[list[str] | None, typer.Option("--agent-arg", help="codex: extra `codex exec` argument")] = None,
        run_id: Annotated[
            str | None,
            typer.Option(
                "--run-id", help="the run's id (default: random); a finished id answers its record for the same request"
            ),
        ] = None,
        capture: opt.Capture = "metadata",
        deadline_s: Annotated[float | None, typer.Option("--deadline-s", help=_DEADLINE_HELP)] = None,
        capture_max_bytes: Annotated[
            int | None, typer.Option("--capture-max-bytes", help="capture: bytes kept per request body/response (16 MiB)")
        ] = None,
        fake_fault: opt.FakeFault = None,
        common: Common = COMMON,
    ) -> None:
        if ctx.invoked_subcommand is not None:
            return
        from harness.app.run_identity import require_same_request, run_identity
        from harness.app.run_store import RunStore
        from harness.app.runs import RunAsk, run_service_request
        from harness.cli.run_exec import HarnessInput, check_prompt, emit_record, start_run, submission_of

        if harness is None or prompt is None:
            raise HitchError("usage_error", "hitch run needs --harness and --prompt (or: hitch run cancel|show ID)", {})
        if harness == "model-call" and agent_arg:
            raise HitchError("usage_error", "--agent-arg is for codex", {})
        if harness == "model-call":
            check_prompt(prompt)
        if fake_fault and svc.engine != "fake":
            raise HitchError("usage_error", "--fake-fault is for --engine fake", {})
        hroot = common.hroot
        agent_args = list(agent_arg or [])
        ask = RunAsk.of(**dataclasses.asdict(svc), model=model, inference=inference, offline=offline)
        run_fields: dict[str, Any] = {"run_id": run_id or "run-" + secrets.token_hex(8), "harness": harness, "capture": capture}
        run_fields["submission"] = submission_of(prompt, max_output_tokens, agent_args, workdir)
        if capture_max_bytes is not None:
            run_fields["capture_max_bytes"] = capture_max_bytes
        if deadline_s is not None:
            run_fields["deadline_s"] = deadline_s
        if fake_fault:
            run_fields["fake_flags"] = [arg for fault in fake_fault for arg in ("--fault", fault)]
        request = run_service_request(hroot, ask, common.root, **run_fields)
        if run_id is not None:
            known = RunStore(hroot).read(run_id)
            if known is not None and known.terminal:  # idempotent: the same request answers its record, nothing runs
                require_same_request(run_id, known, run_identity(hroot, request))
                emit_record(common.as_json, hroot, known.to_json_dict())
                return
        # Codex works in --workdir, else here: kept resolved, so a rerun from elsewhere works in the same folder
        where = (workdir or Path.cwd()).resolve() if harness == "codex" else workdir
        asked = HarnessInput(harness, prompt, max_output_tokens, where, agent_args)
        start_run(hroot, request, asked, request.engine, common.as_json)
