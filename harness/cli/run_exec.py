"""What ``hitch run`` does once its options are read (:mod:`harness.cli.run` declares the command, and imports this
module only when a run starts or a record is asked for: ``hitch run --help`` loads none of it).

Owns :func:`start_run` (create the run through the daemon, run the harness, end the run with its evidence whatever
happens), :func:`check_prompt`, :func:`submission_of`, :class:`HarnessInput` and the record answers of ``run
cancel``.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.agents.codex_home import CodexBinding
from harness.agents.codex_install import find_codex
from harness.agents.codex_runner import CodexRun
from harness.agents.evidence import run_inference_dir, write_harness_evidence, write_harness_input
from harness.agents.model_call import TOKEN_ENV, build_request, call_model, parse_input
from harness.app import progress
from harness.app.daemon_client import DaemonClient, ensure_daemon
from harness.app.harness_admission import admit_harness
from harness.app.profiles import (
    CODEX_FIELDS,
    MODEL_CALL_FIELDS,
    ProfileStore,
    codex_key,
    model_call_key,
)
from harness.app.requests import HarnessArtifactIn, RunRequest
from harness.app.runs import end_run
from harness.cli.output import emit
from harness.contracts.agent_profile import FieldRuleV1, HarnessKeyV1
from harness.contracts.binding import ModelEndpointBindingV1
from harness.contracts.lock import InferenceLockV1
from harness.errors import ERROR_TABLE, HitchError
from harness.ids import digest_bytes
from harness.lock import load_sealed_lock
from harness.paths import HitchRoot

__all__ = ["HarnessInput", "cancelled_record", "check_prompt", "emit_record", "start_run", "submission_of"]


def submission_of(prompt: str, max_output_tokens: int | None, agent_args: list[str], workdir: Path | None) -> dict[str, Any]:
    """What the harness is asked, beyond the service: part of the run's identity (only its digest is kept)."""
    return {
        "prompt_sha256": digest_bytes(prompt.encode("utf-8")),
        "max_output_tokens": max_output_tokens,
        "agent_args": agent_args,
        "workdir": str(workdir.resolve()) if workdir is not None else None,
    }


def check_prompt(prompt: str) -> None:
    """model-call's ``--prompt``: text, or a JSON input list of text messages; refused before anything is admitted
    (``usage_error`` naming the option; a non-text part stays ``inference_modality_unsupported``)."""
    try:
        build_request("-", parse_input(prompt), 1)
    except HitchError as exc:
        if exc.code != "inference_protocol_unsupported":
            raise
        why = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        raise HitchError("usage_error", f"--prompt: {exc.message}{why}", {"option": "--prompt", **exc.details}) from None


def _admitted(hroot: HitchRoot, request: RunRequest) -> RunRequest:
    """The request naming the harness's exact artifact (Codex: the installed one), admitted by the rule the daemon
    applies too (:func:`harness.app.harness_admission.admit_harness`): checked before the run is created."""
    if request.harness == "codex":
        install = find_codex()
        claim = HarnessArtifactIn(artifact=install.artifact, version=install.version, protocol="responses")
        request = request.model_copy(update={"harness_artifact": claim})
    admit_harness(hroot, request)
    return request


def _run_harness(
    harness: str,
    hroot: HitchRoot,
    run: dict[str, Any],
    lock: InferenceLockV1,
    prompt: str,
    max_output_tokens: int | None,
    workdir: Path | None,
    agent_args: list[str],
    engine: str,
) -> tuple[HarnessKeyV1, tuple[FieldRuleV1, ...], dict[str, Any], bool]:
    token = Path(run["token_file"]).read_text(encoding="utf-8").strip()
    if harness == "model-call":
        key = model_call_key(lock)
        if lock.protocol.api != "responses":
            raise HitchError("inference_harness_unsupported", "model-call needs a Responses lock", {"api": lock.protocol.api})
        body = build_request(run["wire_model"], parse_input(prompt), lock.generation.max_output_tokens, max_output_tokens)
        issued = ModelEndpointBindingV1.model_validate(run["binding"])
        res = call_model(run["base_url"], body, binding=issued, env={TOKEN_ENV: token})
        outcome = {
            "harness": "model-call",
            "status": res.status,
            "text": res.text,
            "usage": res.usage,
            "incomplete_reason": res.incomplete_reason,
            "response_id": res.response_id,
            "max_output_tokens": body["max_output_tokens"],
        }
        return key, MODEL_CALL_FIELDS, outcome, True
    install = find_codex()
    key = codex_key(lock, install.artifact, install.version)
    profile = ProfileStore(hroot).require_passing(key, engine)
    ev_dir = run_inference_dir(hroot, run["run_id"])
    home = ev_dir / "codex-home"
    if home.exists():
        shutil.rmtree(home)
    work = workdir or Path.cwd()
    binding = CodexBinding(
        run["base_url"],
        run["wire_model"],
        lock.execution.context_tokens_per_request,
        stream_idle_timeout_ms=lock.execution.request_timeout_ms,
    )
    codex = CodexRun(install, binding, token, home=home, workdir=work, prompt=prompt, agent_args=agent_args,
                     events_path=ev_dir / "codex-events.jsonl")  # fmt: skip
    try:
        result = codex.run()
    except BaseException:  # Ctrl-C: the agent and every command it started end with the run
        codex.cancel()
        raise
    outcome = {
        "harness": "codex",
        "artifact": install.artifact,
        "binary_digest": install.binary_digest,
        "returncode": result.returncode,
        "completed": result.completed,
        "final_message": result.final_message,
        "errors": result.errors,
        "commands": len(result.commands()),
        "profile_id": profile.profile_id,
        "profile_results": [r.to_json_dict() for r in profile.results],
    }
    return key, CODEX_FIELDS, outcome, result.completed


def _record_payload(record: dict[str, Any], hroot: HitchRoot) -> dict[str, Any]:
    return {
        "kind": "run-record",
        "run_id": record["run_id"],
        "record": record,
        "evidence": str(run_inference_dir(hroot, record["run_id"])),
    }


def emit_record(as_json: bool, hroot: HitchRoot, record: dict[str, Any]) -> None:
    err = record.get("error") or {}
    human = f"run {record['run_id']}: {record['status']}" + (f" ({err.get('code')})" if err else "")
    emit(as_json, _record_payload(record, hroot), human)


def cancelled_record(hroot: HitchRoot, run_id: str) -> dict[str, Any]:
    out: dict[str, Any] = DaemonClient(hroot).cancel_run(run_id)["record"]
    return out


@dataclass(frozen=True)
class HarnessInput:
    """What the harness is asked: kept with the run (``harness-input.json``) so ``hitch run rerun`` asks it again."""

    harness: str
    prompt: str
    max_output_tokens: int | None
    workdir: Path | None
    agent_args: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"harness": self.harness, "prompt": self.prompt, "max_output_tokens": self.max_output_tokens,
                "workdir": str(self.workdir) if self.workdir is not None else None, "agent_args": self.agent_args}  # fmt: skip


def start_run(hroot: HitchRoot, request: RunRequest, asked: HarnessInput, engine: str, as_json: bool) -> None:
    """Create the run ``request`` describes through the daemon and run the harness on it (``hitch run``, ``hitch
    run rerun``)."""
    # before any service starts: a missing harness or an uncertified profile fails fast
    request = _admitted(hroot, request)
    client: DaemonClient = ensure_daemon(hroot)  # before blocking: a daemon spawned here must not inherit the mask
    # Ctrl-C while the run is being created is taken right after, inside _execute, so the run it
    # created is ended (cancelled), never left running
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with progress.watch(hroot, str(request.run_id), as_json=as_json) if request.run_id else contextlib.nullcontext():
            run = client.create_run(request)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        raise
    if run.get("existing"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        emit_record(as_json, hroot, run["record"])
        return
    write_harness_input(hroot, run["run_id"], asked.to_json())
    _execute(
        hroot, client, run, asked.harness, asked.prompt, asked.max_output_tokens, asked.workdir, asked.agent_args, engine, as_json
    )


def _execute(
    hroot: HitchRoot,
    client: DaemonClient,
    run: dict[str, Any],
    harness: str,
    prompt: str,
    max_output_tokens: int | None,
    workdir: Path | None,
    agent_args: list[str],
    engine: str,
    as_json: bool,
) -> None:
    """Run the harness and end the run with its terminal status, whatever happens (Ctrl-C included)."""
    run_id = run["run_id"]
    key: HarnessKeyV1 | None = None
    fields: tuple[FieldRuleV1, ...] = ()
    outcome: dict[str, Any] = {"harness": harness}
    status: Literal["completed", "failed", "cancelled"] = "failed"
    error: HitchError | None = HitchError("internal_error", "the run ended before its harness did")
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        lock = load_sealed_lock(hroot, run["inference_id"])
        key, fields, outcome, complete = _run_harness(
            harness, hroot, run, lock, prompt, max_output_tokens, workdir, agent_args, engine
        )
        if complete:
            status, error = "completed", None
        else:
            details = {"returncode": outcome.get("returncode"), "errors": (outcome.get("errors") or [])[-3:]}
            status, error = "failed", HitchError("harness_run_failed", "Codex did not complete its turn", details)
    except HitchError as exc:
        status, error = "failed", exc
    except KeyboardInterrupt:
        status, error = "cancelled", HitchError("run_cancelled", "the run was interrupted (SIGINT)", {})
    finally:
        if error is not None:
            outcome = {**outcome, "error": error.to_dict()}
        write_harness_evidence(hroot, run_id, key, fields, outcome)
        record = end_run(client, run_id, status, error)
    out = run_inference_dir(hroot, run_id)
    if record is None:
        raise HitchError(
            "daemon_unavailable", "the daemon ended during the run; its next start records it interrupted", {"run_id": run_id}
        )
    if record["status"] != "completed":
        err = record.get("error") or {}
        code = str(err["code"]) if err.get("code") in ERROR_TABLE else "internal_error"
        details = {"run_id": run_id, "status": record["status"], "evidence": str(out)}
        if error is not None and error.code == code:
            details = {**error.details, **details}
        raise HitchError(code, str(err.get("message", record["status"])), details)
    sealed = load_sealed_lock(hroot, run["inference_id"])
    payload = {
        "kind": "run",
        "run_id": run_id,
        "inference_id": run["inference_id"],
        "device": sealed.execution.platform.backend,
        "profile": sealed.profile,
        "backend_certification": sealed.execution.backend_certification,
        "evidence": str(out),
        "record": record,
        **outcome,
    }
    human = outcome.get("text") if harness == "model-call" else outcome.get("final_message")
    emit(as_json, payload, f"{human or ''}\n(run {run_id}; evidence {out})")
