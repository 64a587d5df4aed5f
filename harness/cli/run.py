"""``hitch run --harness model-call|codex --model local/ALIAS ...``: one harness run on a local model (spec §10.4).

The run, step by step: check the choices (``--inference sha256:...`` pins a prepared identity, then
``--device`` and ``--profile`` are refused; ``--offline`` never installs and fails with the commands to run
first), start the root's daemon if needed, create the run through it (the service is acquired with the
run as lease owner and the run is registered on the daemon's gateway), check the harness's compatibility
profile for the lock (Codex: a certified profile must exist; ``inference_harness_unsupported`` otherwise),
run the harness with the run token in its private environment, write the evidence under
``runs/<run-id>/inference/`` and delete the run (binding revoked, lease released) whatever happened.
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.agents.codex_home import CodexBinding
from harness.agents.codex_install import find_codex
from harness.agents.codex_runner import CodexRun
from harness.agents.evidence import RunFacts, run_inference_dir, write_run_evidence
from harness.agents.model_call import TOKEN_ENV, build_request, call_model, parse_input
from harness.agents.profiles import CODEX_FIELDS, MODEL_CALL_FIELDS, ProfileStore, codex_key, model_call_key
from harness.cli.output import JsonOpt, RootOpt, cli_command, emit, root_from
from harness.contracts.harness_profile import FieldRuleV1, HarnessKeyV1
from harness.contracts.lock import InferenceLockV1
from harness.daemon import DaemonClient, ensure_daemon
from harness.daemon.core import load_sealed_lock
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.store import read_manifest

__all__ = ["register"]

_HARNESSES = ("model-call", "codex")


def _run_body(
    hroot: HitchRoot,
    root: Path | None,
    model: str | None,
    inference: str | None,
    device: str | None,
    profile: str | None,
    engine: str,
    launcher: str,
    runtime: str | None,
    offline: bool,
) -> dict[str, Any]:
    from harness.cli.local_services import _ensure_runtime, service_runtime

    if inference is not None:
        if device is not None or profile is not None:
            raise HitchError("usage_error", "--inference pins the device and profile; drop --device/--profile", {})
        lock = load_sealed_lock(hroot, inference)
        rt = get_runtime(lock.runtime_id)
        backend: str = lock.execution.platform.backend
        argv = [model or f"local/{lock.model_id}", "--device", backend, "--runtime", rt.name]
        if engine == "sglang":
            _ensure_runtime(hroot, rt, offline, root, argv)
        return {"inference_id": inference, "engine": engine, "launcher": launcher, "runtime": rt.runtime_id, "device": backend}
    if model is None:
        raise HitchError("usage_error", "give --model local/ALIAS or --inference sha256:<id>", {})
    dev, prof = device or "cpu", profile or "baseline"
    rt = service_runtime(dev, prof, engine, launcher, runtime)
    argv = [model, "--device", dev, "--profile", prof, "--runtime", rt.name]
    if engine == "sglang":
        _ensure_runtime(hroot, rt, offline, root, argv)
    return {"model": model, "device": dev, "profile": prof, "runtime": rt.runtime_id, "engine": engine, "launcher": launcher}


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
) -> tuple[HarnessKeyV1, tuple[FieldRuleV1, ...], dict[str, Any], int, bool]:
    token = Path(run["token_file"]).read_text(encoding="utf-8").strip()
    if harness == "model-call":
        key = model_call_key(lock)
        if lock.protocol.api != "responses":
            raise HitchError("inference_harness_unsupported", "model-call needs a Responses lock", {"api": lock.protocol.api})
        body = build_request(run["wire_model"], parse_input(prompt), lock.generation.max_output_tokens, max_output_tokens)
        res = call_model(run["base_url"], body, env={TOKEN_ENV: token})
        outcome = {
            "harness": "model-call",
            "status": res.status,
            "text": res.text,
            "usage": res.usage,
            "incomplete_reason": res.incomplete_reason,
            "response_id": res.response_id,
            "max_output_tokens": body["max_output_tokens"],
        }
        return key, MODEL_CALL_FIELDS, outcome, 1, True
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
    result = codex.run()
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
    # The lock disables parallel tool calls, so each command came from its own model response, plus the last one.
    requests = len(result.commands()) + 1
    return key, CODEX_FIELDS, outcome, requests, result.completed


def register(app: typer.Typer) -> None:
    @app.command("run", help="run a harness (model-call | codex) once on a local model, with evidence under runs/")
    @cli_command
    def run_cmd(
        harness: Annotated[str, typer.Option("--harness", help="model-call | codex")],
        prompt: Annotated[str, typer.Option("--prompt", help="the prompt (model-call: text or the JSON input list)")],
        model: Annotated[str | None, typer.Option("--model", help="local/ALIAS or local/sha256:<hex>")] = None,
        inference: Annotated[str | None, typer.Option("--inference", help="a prepared inference id sha256:<hex>")] = None,
        device: Annotated[str | None, typer.Option("--device", help="cpu | cuda (default cpu)")] = None,
        profile: Annotated[str | None, typer.Option("--profile", help="baseline | throughput")] = None,
        engine: Annotated[str, typer.Option("--engine", help="sglang | fake (contract runs)")] = "sglang",
        launcher: Annotated[str, typer.Option("--launcher", help="process | oci")] = "process",
        runtime: Annotated[str | None, typer.Option("--runtime", help="catalog name or runtime_id")] = None,
        offline: Annotated[bool, typer.Option("--offline", help="never install; fail with the commands to run")] = False,
        max_output_tokens: Annotated[int | None, typer.Option("--max-output-tokens", help="<= the lock's")] = None,
        workdir: Annotated[Path | None, typer.Option("--workdir", help="codex: the agent's working directory")] = None,
        agent_arg: Annotated[list[str] | None, typer.Option("--agent-arg", help="codex: extra `codex exec` argument")] = None,
        run_id: Annotated[str | None, typer.Option("--run-id", help="the run's id (default: random)")] = None,
        as_json: JsonOpt = False,
        root: RootOpt = None,
    ) -> None:
        if harness not in _HARNESSES:
            raise HitchError(
                "inference_harness_unsupported", f"harness {harness!r} is not supported", {"choices": list(_HARNESSES)}
            )
        if harness == "model-call" and agent_arg:
            raise HitchError("usage_error", "--agent-arg is for codex", {})
        hroot = root_from(root)
        body = _run_body(hroot, root, model, inference, device, profile, engine, launcher, runtime, offline)
        body["run_id"] = run_id or "run-" + secrets.token_hex(8)
        if harness == "codex":
            find_codex()  # before any service starts: a missing harness fails fast
        client: DaemonClient = ensure_daemon(hroot)
        before = {s.get("service_id") for s in client.services().get("services", [])}
        run = client.request("POST", "/v1/runs", body, timeout_s=900.0)
        try:
            lock = load_sealed_lock(hroot, run["inference_id"])
            key, fields, outcome, requests, complete = _run_harness(
                harness, hroot, run, lock, prompt, max_output_tokens, workdir, list(agent_arg or []), engine
            )
            facts = RunFacts(
                run["run_id"], run["service_id"], int(run["epoch"]), run["binding_id"], run["base_url"], run["wire_model"],
                lock.execution.platform.backend, requests, complete, run["service_id"] in before,
            )  # fmt: skip
            out = write_run_evidence(
                hroot, facts, lock, read_manifest(hroot, lock.model_id), get_runtime(lock.runtime_id), key, fields, outcome
            )
        finally:
            client.request("DELETE", f"/v1/runs/{run['run_id']}")
        if harness == "codex" and not complete:
            details = {"evidence": str(out), "returncode": outcome["returncode"], "errors": outcome["errors"][-3:]}
            raise HitchError("harness_run_failed", "Codex did not complete its turn", details)
        payload = {"kind": "run", "run_id": run["run_id"], "inference_id": lock.inference_id, "evidence": str(out), **outcome}
        human = outcome.get("text") if harness == "model-call" else outcome.get("final_message")
        emit(as_json, payload, f"{human or ''}\n(run {run['run_id']}; evidence {out})")
