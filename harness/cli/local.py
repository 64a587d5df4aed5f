"""``hitch local ...``: the doctor, draft locks and the engine command line a lock compiles to
(:mod:`harness.app.engine_preview`); ``prepare``, ``status``, ``stop``: local_services; ``serve``: serve."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli import options as opt
from harness.cli.doctor_cmd import doctor
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

if TYPE_CHECKING:  # the commands import what they run: `hitch local --help` builds from the options alone
    from harness.contracts.lock import InferenceLockV1
    from harness.lock import ProfileShort, ServedDevice

app = typer.Typer(no_args_is_help=True, help="locks, doctor and local services")
_BENCHMARK_HELP = (
    "permit benchmark sampling controls (ignore_eos, min_tokens) for the field's benchmark tools; "
    "never for agent runs (a different inference id)"
)
_ARGV_CHECK_HELP = (
    "have SGLang's own parser and resolution (an installed runtime of the same SGLang) read it: every "
    "flag known, every value echoed as the lock means"
)
app.command("doctor", help="read-only: what this machine can certify, and why not")(doctor)


@app.command(
    "lock",
    help="the draft InferenceLockV1 for a model and its inference_id (nothing starts): a summary, the lock itself "
    "with --json, or written to --out FILE",
)
@cli_command
def lock_cmd(
    model: opt.ModelArg,
    device: opt.Device = "auto",
    profile: opt.Profile = "baseline",
    runtime: opt.Runtime = None,
    context: opt.Context = None,
    generation: opt.Generation = None,
    benchmark: Annotated[bool, typer.Option("--benchmark", help=_BENCHMARK_HELP)] = False,
    out: Annotated[Path | None, typer.Option("--out", help="write the lock (what check-lock and argv read) to this file")] = None,
    common: Common = COMMON,
) -> None:
    from harness.devices import probe_cpu
    from harness.lock import DEFAULT_GENERATION, build_lock, describe_sampling, generation_profile
    from harness.paths import atomic_write_bytes
    from harness.runtimes import default_runtime, get_runtime
    from harness.store import resolve_model

    prof: ProfileShort = "baseline" if profile == "baseline" else "throughput"
    sampling = generation_profile(generation) if generation is not None else DEFAULT_GENERATION
    manifest = resolve_model(common.hroot, model)
    dev = _lock_device(device, runtime)
    rt = get_runtime(runtime) if runtime else default_runtime(dev)
    lock = build_lock(
        manifest,
        rt,
        device=dev,
        profile=prof,
        cpu_cores_per_node=probe_cpu().cores_per_node,
        context_tokens=context,
        benchmark=benchmark,
        sampling=sampling.sampling,
    )
    if out is not None:
        atomic_write_bytes(out, (json.dumps(lock.to_json_dict(), indent=2, sort_keys=True) + "\n").encode())
    payload = {
        "kind": "inference-lock-draft",
        "inference_id": lock.inference_id,
        "runtime": rt.name,
        "generation_profile": sampling.model_dump(mode="json", include={"name", "version", "source"}),
        "lock": lock.to_json_dict(),
    }
    if out is not None:
        payload["written"] = str(out)
    gen = lock.generation
    human = [
        f"draft lock for {model} (a summary, not a lock file: --out FILE writes the lock, --json prints it)",
        f"  inference_id: {lock.inference_id}",
        f"  device:       {dev}" + (" (auto)" if device == "auto" else ""),
        f"  runtime:      {rt.name}",
        f"  profile:      {lock.profile}",
        f"  context:      {lock.execution.context_tokens_per_request} tokens per request; output budget "
        f"{gen.max_output_tokens} tokens",
        f"  sampling:     {describe_sampling(gen, sampling)}",
        f"                {gen.override_policy}: a request may omit these fields or send the lock's values, any other "
        "value is refused",
    ]
    if out is not None:
        human.append(f"written: {out}")
    emit(common.as_json, payload, "\n".join(human))


def _lock_device(device: str, runtime: str | None) -> ServedDevice:
    """``--device`` for a draft lock: auto is the one device rule's pick (the runtime's device when one is named)."""
    from harness.app.choice import resolve_choice
    from harness.app.spec import ServiceSpec
    from harness.lock import served_device

    if device != "auto":
        return served_device(device)
    return resolve_choice(ServiceSpec(device="auto", runtime=runtime, engine="sglang", allow_uncertified=True)).device


@app.command("check-lock", help="strictly validate a lock file (unknown fields, cross-backend fields, id)")
@cli_command
def check_lock_cmd(
    path: Annotated[Path, typer.Argument(help="lock.json")],
    common: Common = COMMON,
) -> None:
    lock = _read_lock(path)
    emit(common.as_json, {"kind": "inference-lock-check", "valid": True, "inference_id": lock.inference_id}, "lock is valid")


def _read_lock(path: Path) -> InferenceLockV1:
    """A lock file, or what ``hitch local lock --json`` prints (the lock under ``lock``), strictly validated."""
    from harness.lock import validate_lock

    opt.check_path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HitchError("inference_lock_invalid", f"cannot read lock {path}: {exc}", {"path": str(path)}) from exc
    if isinstance(data, dict) and data.get("kind") == "inference-lock-draft":
        data = data.get("lock")
    return validate_lock(data)


@app.command("argv", help="the engine command line and environment a lock compiles to (nothing starts)")
@cli_command
def argv_cmd(
    path: Annotated[Path, typer.Argument(help="lock.json, or the output of `hitch local lock --json`")],
    probe: Annotated[
        bool, typer.Option("--probe", help="prepare's first start of a draft: SGLang sizes the token pool and prefill")
    ] = False,
    check: Annotated[bool, typer.Option("--check", help=_ARGV_CHECK_HELP)] = False,
    parser_root: Annotated[
        Path | None, typer.Option("--parser-root", help="HITCH_ROOT holding that runtime (default: this root)")
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU UUID the engine sees (default: NVML's first GPU)")] = None,
    common: Common = COMMON,
) -> None:
    from harness.app.engine_preview import engine_preview
    from harness.cli import progress
    from harness.paths import HitchRoot

    root = common.hroot
    reader = (HitchRoot.at(parser_root) if parser_root else root) if check else None
    lock = _read_lock(path)
    shown = "having SGLang's parser read the command line" if check else "compiling the command line"
    with progress.step(shown, as_json=common.as_json or not check):
        payload = engine_preview(root, lock, probe=probe, gpu=gpu, parser_root=reader)
    checked = payload["checked"]
    lines = [
        f"runtime: {payload['runtime']}  inference_id: {payload['inference_id']}"
        f"  ({'probe start' if probe else 'start'}; port: chosen at start)",
        "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(payload["env"].items())) + " \\",
        "  " + " \\\n  ".join(shlex.join(pair) for pair in _pairs(payload["argv"])),
    ]
    if checked is not None:
        lines.append(
            f"read by SGLang {checked['sglang']} ({checked['runtime']}): every flag known, every value as the lock means"
            f" ({checked['fields']} /server_info fields checked, parsed and resolved)"
        )
    emit(common.as_json, payload, "\n".join(lines))


def _pairs(argv: list[str]) -> list[list[str]]:
    """The executable, then each flag with its value: one group per line."""
    first = next((i for i, tok in enumerate(argv) if tok.startswith("--")), len(argv))
    out = [argv[:first]]
    for tok in argv[first:]:
        if tok.startswith("--"):
            out.append([tok])
        else:
            out[-1].append(tok)
    return out
