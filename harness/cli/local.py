"""``hitch local ...``: doctor, draft locks, the engine command line a lock compiles to (and prepare/status/stop)."""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import options as opt
from harness.cli.doctor_cmd import doctor
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.contracts.lock import InferenceLockV1
from harness.devices import probe_cpu
from harness.errors import HitchError
from harness.lock import Device, ProfileShort, build_lock, validate_lock
from harness.paths import HitchRoot
from harness.runtimes import default_runtime, get_runtime, planned_runtime
from harness.store import model_files_dir, read_manifest, resolve_model

if TYPE_CHECKING:
    from harness.contracts.runtime import InferenceRuntimeManifestV1
    from harness.engine import EngineLaunch

app = typer.Typer(no_args_is_help=True, help="locks, doctor and local services")
app.command("doctor", help="read-only: what this machine can certify, and why not")(doctor)


@app.command("lock", help="print the draft InferenceLockV1 and its inference_id (nothing starts)")
@cli_command
def lock_cmd(
    model: opt.ModelArg,
    device: Annotated[str, typer.Option("--device", help="cpu | cuda (metal parses but is refused in P0)")] = "cpu",
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
    if device not in ("cpu", "cuda", "metal"):
        raise HitchError("inference_device_unsupported", f"unknown device {device!r}", {"choices": ["cpu", "cuda", "metal"]})
    if profile not in ("baseline", "throughput"):
        raise HitchError("usage_error", f"unknown profile {profile!r}", {"choices": ["baseline", "throughput"]})
    dev: Device = "cpu" if device == "cpu" else "cuda" if device == "cuda" else "metal"
    prof: ProfileShort = "baseline" if profile == "baseline" else "throughput"
    if dev == "metal":
        raise HitchError("inference_device_unsupported", "metal is a P1 backend and is refused in P0", {"device": "metal"})
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
    lock = _read_lock(path)
    emit(common.as_json, {"kind": "inference-lock-check", "valid": True, "inference_id": lock.inference_id}, "lock is valid")


def _read_lock(path: Path) -> InferenceLockV1:
    """A lock file, or what ``hitch local lock --json`` prints (the lock under ``lock``), strictly validated."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HitchError("inference_lock_invalid", f"cannot read lock {path}: {exc}", {"path": str(path)}) from exc
    if isinstance(data, dict) and data.get("kind") == "inference-lock-draft":
        data = data.get("lock")
    return validate_lock(data)


PREVIEW_PORT = 30000  # SGLang's default; a service's port is chosen when it starts


@app.command("argv", help="the engine command line and environment a lock compiles to (nothing starts)")
@cli_command
def argv_cmd(
    path: Annotated[Path, typer.Argument(help="lock.json, or the output of `hitch local lock --json`")],
    probe: Annotated[
        bool, typer.Option("--probe", help="prepare's first start of a draft: SGLang sizes the token pool and prefill")
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="have SGLang's own parser and resolution (an installed runtime of the same SGLang) read it: every "
            "flag known, every value echoed as the lock means",
        ),
    ] = False,
    parser_root: Annotated[
        Path | None, typer.Option("--parser-root", help="HITCH_ROOT holding that runtime (default: this root)")
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU UUID the engine sees (default: NVML's first GPU)")] = None,
    common: Common = COMMON,
) -> None:
    from harness.devices import probe_cuda
    from harness.engine import EngineProgram, prepare_launch

    root = common.hroot
    lock = _read_lock(path)
    read_manifest(root, lock.model_id)  # the model must be in this root's store
    runtime = get_runtime(lock.runtime_id)
    program = EngineProgram.from_runtime(planned_runtime(root, runtime))
    uuid = None
    if lock.execution.platform.backend == "cuda":
        gpus = probe_cuda().gpus
        uuid = gpu or (gpus[0].uuid if gpus else "<the leased GPU's UUID>")
    with tempfile.TemporaryDirectory(prefix="hitch-argv-") as tmp:
        launch = prepare_launch(
            HitchRoot(Path(tmp)),  # the epoch's keys and home are written here, then dropped
            lock,
            model_files_dir(root, lock.model_id),
            program,
            service_id="argv",
            epoch=1,
            port=PREVIEW_PORT,
            gpu_uuid=uuid,
            probe=probe,
        )
        checked = _check_argv(launch, runtime, HitchRoot.at(parser_root) if parser_root else root) if check else None
        private = str(Path(tmp) / "inference" / "private" / "argv")
        shown = [_hide(a, private) for a in launch.spec.argv]
        env = {k: _hide(v, private) for k, v in launch.spec.env.items()}
    payload: dict[str, Any] = {
        "kind": "engine-argv",
        "inference_id": lock.inference_id,
        "runtime": runtime.name,
        "probe": probe,
        "argv": shown,
        "env": env,
        "expected_server_info": {k: _hide(v, private) for k, v in launch.expected.items()},
        "checked": checked,
    }
    lines = [
        f"runtime: {runtime.name}  inference_id: {lock.inference_id}"
        f"  ({'probe start' if probe else 'start'}; port: chosen at start)",
        "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())) + " \\",
        "  " + " \\\n  ".join(shlex.join(pair) for pair in _pairs(shown)),
    ]
    if checked is not None:
        lines.append(
            f"read by SGLang {checked['sglang']} ({checked['runtime']}): every flag known, every value as the lock means"
            f" ({checked['fields']} /server_info fields checked, parsed and resolved)"
        )
    emit(common.as_json, payload, "\n".join(lines))


def _hide(value: Any, private: str) -> Any:
    """The temporary private folder of the preview shown as ``<private>`` (a service has its own)."""
    return value.replace(private, "<private>") if isinstance(value, str) else value


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


def _check_argv(launch: EngineLaunch, runtime: InferenceRuntimeManifestV1, parser_root: HitchRoot) -> dict[str, Any]:
    from harness.engine.argv_check import case_from_launch, parser_runtime, read_with_sglang, require_accepted

    reader = parser_runtime(parser_root, runtime)
    if reader is None:
        raise HitchError(
            "inference_runtime_unavailable",
            f"no runtime with SGLang {runtime.engine_version} is installed under {parser_root.path} to read the command"
            " line: install one (`hitch runtime install`) or pass --parser-root",
            {"engine_version": runtime.engine_version, "root": str(parser_root.path)},
        )
    case = case_from_launch("argv", launch)
    report = read_with_sglang(reader, [case])
    require_accepted(report, [case])
    return {"sglang": report.versions.get("sglang"), "runtime": reader.manifest.name, "fields": len(case.expected)}
