"""``hitch local serve local/ALIAS``: an OpenAI-compatible endpoint for people and external tools.

Starts the root's daemon if none runs, creates a run through it (``POST /v1/runs``: the service is
acquired with the run as lease owner — prepared first when this model/device/profile has no sealed lock —
and the run is registered on the daemon's gateway), then prints the gateway base URL, the wire model name
and the path of the 0600 file that holds the run token. The token itself is never printed. With
``--for-containers`` the base URL is the one a container on hitch's eval network must use (the gateway's
listener on that network's bridge address); the run is refused with ``local_inference_topology_unsupported``
when a probe container of ``--eval-image`` cannot reach it, or can reach the engine. The lease is
held while this command runs; SIGINT or SIGTERM deletes the run (binding revoked, lease released) and the
command exits 0. While it waits for the service, the phases show on stderr (:mod:`harness.app.progress`).

While serving it reads the run's record once a second: a run someone else ended (``hitch local stop --force``,
``hitch daemon stop --force``: ``cancelled``, ``operator_stop``; the engine failed) or a daemon that went away
ends the command at once with one line saying who ended it and the run's error code, and a non-zero exit.

The signals are blocked once the daemon answers and taken with ``sigwait``: one that arrives while the
run is being created is handled right after, so a run is never left behind. ``--run-id`` of a run that
ended answers its record when the request is the same, ``run_conflict`` when it is not
(:mod:`harness.app.run_identity`); nothing is served again either way.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import options as opt
from harness.cli.output import COMMON, JSON_SCHEMA_VERSION, Common, cli_command
from harness.errors import ERROR_TABLE, HitchError

if TYPE_CHECKING:  # imported by the command: `hitch local --help` loads no daemon client
    from harness.app.daemon_client import DaemonClient

__all__ = ["register"]

_FOR_CONTAINERS_HELP = (
    "serve containers: the URL is on the bridge address of hitch's eval network (probed from "
    "--eval-image first; the engine must be unreachable from there)"
)

_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_WATCH_S = 1.0  # how often a serve reads its run's record: a stop by someone else is seen within this


def _human(run: dict[str, Any]) -> str:
    reach = f"  (for containers on Docker network {run['eval_network']})" if run.get("for_containers") else ""
    return "\n".join(
        [
            f"base_url:   {run['base_url']}{reach}",
            f"model:      {run['wire_model']}",
            f"token_file: {run['token_file']}  (send it as: Authorization: Bearer $(cat FILE))",
            f"sampling:   {run['sampling']}",
            f"run:        {run['run_id']} (lease {run['lease_id']})",
            "serving; Ctrl-C or SIGTERM ends the run",
        ]
    )


def _say(as_json: bool, payload: dict[str, Any], human: str) -> None:
    """One JSON object per line with ``--json`` (a reader can act on the first line while we serve)."""
    line = json.dumps({"schema_version": JSON_SCHEMA_VERSION, **payload}, sort_keys=True) if as_json else human
    sys.stdout.write(line.rstrip("\n") + "\n")
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    @app.command("serve", help="serve local/ALIAS through the gateway until SIGINT/SIGTERM (prints URL, model, token file)")
    @cli_command
    def serve_cmd(
        model: opt.ModelArg,
        svc: opt.ServiceOptions = opt.DEFAULT_SERVICE,
        run_id: opt.NewRunId = None,
        capture: opt.Capture = "metadata",
        for_containers: Annotated[bool, typer.Option("--for-containers", help=_FOR_CONTAINERS_HELP)] = False,
        eval_image: Annotated[
            str | None, typer.Option("--eval-image", help="with --for-containers: the eval containers' image (ID or digest)")
        ] = None,
        common: Common = COMMON,
    ) -> None:
        from harness.app import progress
        from harness.app.daemon_client import ensure_daemon
        from harness.app.run_identity import new_run_id
        from harness.app.service import serve_request
        from harness.app.spec import ServiceSpec
        from harness.lock import DEFAULT_GENERATION, describe_sampling

        opt.check_capture(capture)
        if for_containers and eval_image is None:
            raise HitchError("usage_error", "--for-containers needs --eval-image (the image the eval containers run)", {})
        if eval_image is not None and not for_containers:
            raise HitchError("usage_error", "--eval-image goes with --for-containers", {})
        ask = ServiceSpec.of(model=model, **dataclasses.asdict(svc))
        run_id = run_id or new_run_id()  # known before the daemon answers: the key its progress is shown under
        request = serve_request(ask, run_id=run_id, capture=capture, for_containers=for_containers, eval_image=eval_image)
        client = ensure_daemon(common.hroot)  # before blocking: a daemon spawned here must not inherit the mask
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        with progress.watch(common.hroot, run_id, as_json=common.as_json):
            run = client.create_run(request)
        run.pop("schema_version", None)
        if run.get("existing"):  # a run id that ended, asked the same again: its record; nothing is served again
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            record = run["record"]
            kept = {"kind": "run-record", "run_id": record["run_id"], "record": record}
            _say(common.as_json, kept, f"run {record['run_id']} ended ({record['status']}); nothing is served again")
            return
        profile = ask.generation or DEFAULT_GENERATION
        run["generation_profile"] = profile.model_dump(mode="json", include={"name", "version", "source"})
        run["sampling"] = describe_sampling(profile.sampling, profile)
        ended: HitchError | None = None
        try:
            _say(common.as_json, run, _human(run))
            got, ended = _serve_until_stopped(client, run["run_id"])
        finally:
            deleted = client.delete_run(run["run_id"]) if ended is None else None
        if ended is not None or deleted is None:
            raise ended or HitchError("internal_error", "the run ended without a record", {})
        deleted.pop("schema_version", None)
        name = signal.Signals(got).name
        _say(common.as_json, {**deleted, "signal": name}, f"stopped on {name}: run {run['run_id']} revoked, lease released")


def _serve_until_stopped(client: DaemonClient, run_id: str) -> tuple[int, HitchError | None]:
    """Wait for SIGINT/SIGTERM (the signal, None), reading the run's record once a second: a run ended by someone
    else, or a daemon gone, ends the wait with the error that says who ended it (0, error)."""
    from harness.contracts.run import TERMINAL_STATUSES

    while True:
        got = signal.sigtimedwait(_STOP_SIGNALS, _WATCH_S)
        if got is not None:
            return got.si_signo, None
        try:
            record = client.run_record(run_id)["record"]
        except HitchError as err:
            if err.code != "daemon_unavailable":
                continue  # a slow answer is no verdict: the next second asks again
            return 0, HitchError("inference_service_stopped", "the daemon stopped while this run was served", {"run_id": run_id})
        if record.get("status") in TERMINAL_STATUSES:
            return 0, _ended_error(record)


def _ended_error(record: dict[str, Any]) -> HitchError:
    """The error a run someone else ended is reported with: its own code and message, and who stopped it."""
    error = record.get("error") or {}
    code = str(error.get("code") or "inference_service_stopped")
    stop = record.get("stopped_by") or {}
    who = f" by {stop.get('by')}" if stop.get("by") else ""
    message = f"run {record['run_id']} ended {record['status']}{who}: {error.get('message', 'no reason recorded')}"
    return HitchError(code if code in ERROR_TABLE else "inference_service_stopped", message, {"run_id": record["run_id"]})
