"""``hitch eval harbor install`` and ``hitch eval harbor run TASKS --model local/ALIAS ...``.

``install`` puts Harbor in a private, hash-locked venv under the root (:mod:`harness.evals.harbor_install`);
``run`` admits the agent (a passing compatibility profile for this engine, runtime and model:
:mod:`harness.evals.harbor_agents`; else ``inference_harness_unsupported`` before anything starts), runs the
tasks' trials on the local model, one run binding per trial (:mod:`harness.evals.harbor_run`), and prints the
evaluation record.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import options as opt
from harness.cli.compare import register_eval_compare
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

if TYPE_CHECKING:  # the commands import what they run: `hitch eval --help` loads neither Harbor nor the daemon client
    from harness.contracts.evaluation import EvaluationRecordV1, TrialOutcomeV1

app = typer.Typer(no_args_is_help=True, help="agent evaluations on a local model")
harbor_app = typer.Typer(no_args_is_help=True, help="Harbor trials (local Docker) through the gateway")
_AGENT_HELP = (
    "terminus-2 (model calls from Harbor's process) | fixtures.harbor_agents.shell_agent:ShellAgent "
    "(model calls from inside the trial container, through the eval network) | oracle | nop; a model-calling "
    "agent needs a passing compatibility profile (pytest certify -k agents.harbor)"
)
app.add_typer(harbor_app, name="harbor")
register_eval_compare(app)


@harbor_app.command("install", help="Harbor's hash-locked venv and the compose v2 plugin under the root")
@cli_command
def install_cmd(common: Common = COMMON) -> None:
    from harness.evals.harbor_install import install_harbor

    hroot = common.hroot
    found, already, seconds, size = install_harbor(hroot, progress=sys.stderr)
    payload = {"kind": "harbor-install", "path": str(found.path), "python": str(found.python),
               "docker_config": str(found.docker_config), "versions": found.versions, "already_installed": already,
               "seconds": seconds, "venv_bytes": size}  # fmt: skip
    mb = f"{size / 1e6:.0f} MB" if size else "?"
    emit(common.as_json, payload, f"harbor {found.versions.get('harbor')} at {found.path} ({mb}, {seconds}s)")


def _requests(trial: TrialOutcomeV1) -> str:
    return str(trial.usage.requests) if trial.usage else "-"


def _times(trial: TrialOutcomeV1) -> str:
    t = trial.timing
    if t is None:
        return ""
    parts = [("setup", t.environment_setup_s), ("agent", t.agent_execution_s), ("verifier", t.verifier_s),
             ("teardown", t.teardown_s), ("total", t.total_s)]  # fmt: skip
    return " " + " ".join(f"{name}={value}s" for name, value in parts if value is not None)


def _retried(trial: TrialOutcomeV1) -> str:
    failed = [a.error.code for a in trial.attempts if a.error is not None]
    return f" (run again after: {', '.join(failed)})" if failed else ""


def _kwargs(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HitchError("usage_error", "--agent-kwarg is KEY=VALUE (VALUE as JSON, else a string)", {"given": item})
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


@harbor_app.command("run", help="run Harbor tasks on a local model: one run binding per trial, one evaluation record")
@cli_command
def run_cmd(
    tasks: Annotated[Path, typer.Argument(help="a Harbor task directory or a folder of them (e.g. fixtures/harbor_tasks)")],
    model: opt.Model = None,
    inference: opt.Inference = None,
    agent: Annotated[str, typer.Option("--agent", help=_AGENT_HELP)] = "terminus-2",
    agent_path: Annotated[
        list[Path] | None, typer.Option("--agent-path", help="a folder put on Harbor's sys.path (for --agent module:Class)")
    ] = None,
    env: Annotated[str, typer.Option("--env", help="Harbor environment: docker (others are refused)")] = "docker",
    attempts: Annotated[int, typer.Option("-k", "--n-attempts", help="trials per task")] = 1,
    concurrent: Annotated[int, typer.Option("-n", "--n-concurrent", help="trials at once")] = 2,
    agent_kwarg: Annotated[list[str] | None, typer.Option("--agent-kwarg", help="KEY=VALUE for the agent")] = None,
    infra_retries: Annotated[
        int,
        typer.Option("--infra-retries", help="runs again of a trial whose engine failed under it (same lock, new run)", min=0),
    ] = 1,
    svc: opt.ServiceOptions = opt.DEFAULT_SERVICE,
    offline: opt.Offline = False,
    eval_id: Annotated[str | None, typer.Option("--eval-id", help="the evaluation's id (default: random)")] = None,
    model_capture: Annotated[
        str, typer.Option("--model-capture", help="off | metadata | full: what each trial's run captures (0600, under the run)")
    ] = "metadata",
    require_model_capture: Annotated[
        bool,
        typer.Option(
            "--require-model-capture",
            help="a trial whose capture is incomplete fails the evaluation closed (no later trial starts; exit non-zero)",
        ),
    ] = False,
    fake_script: Annotated[
        Path | None, typer.Option("--fake-script", hidden=True, help="--engine fake only: scripted model turns (JSON lines)")
    ] = None,
    common: Common = COMMON,
) -> None:
    from harness.app.daemon_client import ensure_daemon
    from harness.app.runs import RunAsk, run_service_request, served_model_id
    from harness.evals.harbor_agents import known_agent, require_agent
    from harness.evals.harbor_install import require_harbor
    from harness.evals.harbor_run import EvalOptions, HarborEvaluation, model_connection, task_dirs
    from harness.evals.harbor_verifier import verifiers_of

    model_connection(agent, env)  # a topology the gateway cannot serve is refused before anything starts
    if model_capture not in ("off", "metadata", "full"):
        raise HitchError("usage_error", "--model-capture is off|metadata|full", {"model_capture": model_capture})
    if require_model_capture and model_capture == "off":
        raise HitchError("usage_error", "--require-model-capture needs --model-capture metadata or full", {})
    known_agent(agent)  # so is an agent no compatibility profile can exist for
    if fake_script is not None and svc.engine != "fake":
        raise HitchError("usage_error", "--fake-script is for --engine fake", {})
    hroot = common.hroot
    install = require_harbor(hroot)
    found = task_dirs(tasks)
    verifiers_of(found, os.environ)  # a verifier's missing credential fails before any service, run or container
    ask = RunAsk.of(**dataclasses.asdict(svc), model=model, inference=inference, offline=offline)
    flags = ["--fake-script", str(fake_script.resolve())] if fake_script is not None else []
    request = run_service_request(hroot, ask, common.root, capture=model_capture, fake_flags=flags)
    paths = [p.resolve() for p in agent_path or []]
    version = str(install.versions.get("harbor", "unknown"))
    model_id = served_model_id(hroot, request)
    profile = require_agent(hroot, agent, version, str(request.runtime), model_id, request.engine, paths)
    options = EvalOptions(
        found, agent, env, attempts, concurrent, _kwargs(agent_kwarg or []), eval_id, agent_paths=paths,
        infra_retries=infra_retries, agent_profile_id=profile.profile_id if profile is not None else None,
        require_model_capture=require_model_capture,
    )  # fmt: skip
    evaluation = HarborEvaluation(hroot, install, ensure_daemon(hroot), request, options)

    def progress(event: dict[str, Any]) -> None:
        if not common.as_json:
            sys.stderr.write(f"{event.get('event')}: {event.get('trial')} reward={event.get('reward')}\n")

    record = evaluation.run(progress)
    lines = [
        f"{t.trial:<24} {t.status:<10} reward={t.reward} requests={_requests(t)}{_times(t)}{_retried(t)}" for t in record.trials
    ]
    path = evaluation.evaluations.path(record.evaluation_id)
    payload = {"kind": "harbor-evaluation", "path": str(path), "record": record.to_json_dict()}
    emit(common.as_json, payload, "\n".join([*lines, _locality(record), f"(evaluation {record.evaluation_id}: {path})"]))


def _locality(record: EvaluationRecordV1) -> str:
    """Spec §11.1's words: the candidate is local; the verifier is local, or not local / unknown."""
    remote = sorted({v.task for v in record.verifiers or [] if v.locality != "local"})
    verifier = f"not local or unknown ({', '.join(remote)})" if remote else "local"
    return f"candidate: local; verifier: {verifier}; runs offline: {'yes' if record.offline else 'no'}"


@harbor_app.command("resume", help="run again an evaluation's trials that have no terminal result, on the same lock")
@cli_command
def resume_cmd(evaluation_id: opt.EvaluationIdArg, common: Common = COMMON) -> None:
    from harness.app.daemon_client import ensure_daemon
    from harness.app.evaluation_store import EvaluationStore
    from harness.app.requests import RunRequest, parse_request
    from harness.app.runs import served_model_id
    from harness.evals.harbor_agents import require_agent
    from harness.evals.harbor_install import require_harbor
    from harness.evals.harbor_run import HarborEvaluation
    from harness.runtimes import get_runtime

    hroot = common.hroot
    install = require_harbor(hroot)
    plan = EvaluationStore(hroot).read_plan(evaluation_id)
    body = {**plan.run_body, **({"inference_id": plan.inference_id} if plan.inference_id else {})}
    paths = [Path(p) for p in plan.agent_paths]
    version = str(install.versions.get("harbor", "unknown"))
    # the agent is admitted again: its compatibility profile must still pass for this engine, runtime and model
    require_agent(
        hroot,
        plan.agent,
        version,
        get_runtime(str(body["runtime"])).runtime_id,  # the plan keeps the runtime as it was asked: a name or an id
        served_model_id(hroot, parse_request(RunRequest, body)),
        body.get("engine", "sglang"),
        paths,
    )
    evaluation = HarborEvaluation.resume(hroot, install, ensure_daemon(hroot), evaluation_id)
    if not evaluation.pending:
        payload = {"kind": "harbor-resume", "evaluation_id": evaluation_id, "resumed": [], "nothing_to_resume": True}
        emit(common.as_json, payload, f"evaluation {evaluation_id}: every trial has a terminal result; nothing to resume")
        return
    pending = evaluation.pending

    def progress(event: dict[str, Any]) -> None:
        if not common.as_json:
            sys.stderr.write(f"{event.get('event')}: {event.get('trial')} reward={event.get('reward')}\n")

    record = evaluation.run(progress)
    lines = [f"{t.trial:<32} {t.status:<10} reward={t.reward} requests={_requests(t)}{_times(t)}" for t in record.trials]
    path = evaluation.evaluations.path(record.evaluation_id)
    payload = {"kind": "harbor-resume", "path": str(path), "resumed": pending, "record": record.to_json_dict()}
    emit(common.as_json, payload, "\n".join([*lines, f"(evaluation {record.evaluation_id}, resume {record.resumed}: {path})"]))


@harbor_app.command("regrade", help="verifier-only rerun: re-score the kept trial outputs of an evaluation; starts no service")
@cli_command
def regrade_cmd(evaluation_id: opt.EvaluationIdArg, common: Common = COMMON) -> None:
    from harness.app.evaluation_store import EvaluationStore
    from harness.evals.harbor_install import require_harbor
    from harness.evals.harbor_regrade import regrade_evaluation

    hroot = common.hroot
    record = regrade_evaluation(hroot, require_harbor(hroot), evaluation_id)
    path = EvaluationStore(hroot).path(record.evaluation_id)
    lines = [f"{t.trial:<40} {t.status:<10} reward={t.reward} (re-scored run {t.run_id})" for t in record.trials]
    payload = {"kind": "harbor-regrade", "path": str(path), "record": record.to_json_dict()}
    emit(common.as_json, payload, "\n".join([*lines, f"(evaluation {record.evaluation_id} re-scores {evaluation_id}: {path})"]))
