"""``hitch local ...``: the doctor and draft locks (``prepare``, ``status``, ``stop``, ``serve``: local_services, serve)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from harness.cli import options as opt
from harness.cli.doctor_cmd import doctor
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.devices import probe_cpu
from harness.errors import HitchError
from harness.lock import ProfileShort, build_lock, served_device, validate_lock
from harness.runtimes import default_runtime, get_runtime
from harness.store import resolve_model

app = typer.Typer(no_args_is_help=True, help="locks, doctor and local services")
app.command("doctor", help="read-only: what this machine can certify, and why not")(doctor)


@app.command("lock", help="print the draft InferenceLockV1 and its inference_id (nothing starts)")
@cli_command
def lock_cmd(
    model: opt.ModelArg,
    device: Annotated[str, typer.Option("--device", help="cpu | cuda (metal parses but is not served)")] = "cpu",
    profile: opt.Profile = "baseline",
    runtime: opt.Runtime = None,
    context: opt.Context = None,
    benchmark: Annotated[
        bool,
        typer.Option(
            "--benchmark",
            help="permit benchmark sampling controls (ignore_eos, min_tokens) for the field's benchmark tools; "
            "never for agent runs (a different inference id)",
        ),
    ] = False,
    common: Common = COMMON,
) -> None:
    dev = served_device(device)
    if profile not in ("baseline", "throughput"):
        raise HitchError("usage_error", f"unknown profile {profile!r}", {"choices": ["baseline", "throughput"]})
    prof: ProfileShort = "baseline" if profile == "baseline" else "throughput"
    manifest = resolve_model(common.hroot, model)
    rt = get_runtime(runtime) if runtime else default_runtime(dev)
    lock = build_lock(
        manifest,
        rt,
        device=dev,
        profile=prof,
        cpu_cores_per_node=probe_cpu().cores_per_node,
        context_tokens=context,
        benchmark=benchmark,
    )
    emit(
        common.as_json,
        {"kind": "inference-lock-draft", "inference_id": lock.inference_id, "runtime": rt.name, "lock": lock.to_json_dict()},
        f"inference_id: {lock.inference_id}\nruntime: {rt.name}\n" + json.dumps(lock.to_json_dict(), indent=2),
    )


@app.command("check-lock", help="strictly validate a lock file (unknown fields, cross-backend fields, id)")
@cli_command
def check_lock_cmd(
    path: Annotated[Path, typer.Argument(help="lock.json")],
    common: Common = COMMON,
) -> None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HitchError("inference_lock_invalid", f"cannot read lock {path}: {exc}", {"path": str(path)}) from exc
    lock = validate_lock(data)
    emit(common.as_json, {"kind": "inference-lock-check", "valid": True, "inference_id": lock.inference_id}, "lock is valid")
