"""``hitch local prepare|status|stop|unquarantine``: services of this root, always through its daemon.

``prepare`` installs a missing runtime first (progress on stderr) unless ``--offline``, which fails at
once with ``inference_runtime_unavailable`` and the exact commands to run first; then the daemon (started
on demand) runs the prepare flow of :mod:`harness.daemon.prepare` and this prints the sealed
``inference_id``. ``status`` and ``stop`` never touch state files themselves.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from harness.app.daemon_client import DaemonClient, daemon_running, ensure_daemon
from harness.cli import options as opt
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.devices.choice import DeviceChoice
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, install_runtime, installed_runtime

__all__ = ["device_argv", "register", "service_choice"]


def _commands(runtime: InferenceRuntimeManifestV1, root: Path | None, prepare_argv: list[str]) -> list[str]:
    root_flag = f" --root {shlex.quote(str(root))}" if root is not None else ""
    return [
        f"hitch runtime install {runtime.name}{root_flag}",
        "hitch local prepare " + " ".join(shlex.quote(a) for a in prepare_argv) + root_flag,
    ]


def _ensure_runtime(
    hroot: HitchRoot, runtime: InferenceRuntimeManifestV1, offline: bool, root: Path | None, prepare_argv: list[str]
) -> None:
    if runtime.package.kind != "python-env":
        if not offline:
            install_runtime(hroot, runtime)  # pulls the pinned digest (progress on stderr)
            return
        missing = _offline_image_missing(runtime)
        if missing is None:
            return
        _offline_refusal(runtime, root, prepare_argv, missing)
    if installed_runtime(hroot, runtime) is not None:
        return
    if offline:
        _offline_refusal(runtime, root, prepare_argv, "it is not installed")
    install_runtime(hroot, runtime)


def _offline_image_missing(runtime: InferenceRuntimeManifestV1) -> str | None:
    """Why an OCI runtime cannot start offline (never pulls), or None when its pinned image is in Docker."""
    from harness.runtimes.pins import inspect_image

    pkg = runtime.package
    if pkg.kind != "oci" or pkg.digest is None:
        return "it has no pinned digest"
    try:
        inspect_image(pkg.reference())
    except HitchError as err:
        return err.message
    return None


def _offline_refusal(runtime: InferenceRuntimeManifestV1, root: Path | None, prepare_argv: list[str], why: str) -> NoReturn:
    commands = _commands(runtime, root, prepare_argv)
    if runtime.package.kind == "oci" and runtime.package.digest is None:  # install refuses a tag: pin a local image
        commands[0] = commands[0].replace("hitch runtime install", "hitch runtime pin", 1)
    raise HitchError(
        "inference_runtime_unavailable",
        f"runtime {runtime.name} cannot run offline ({why}) and --offline forbids installing or pulling it; run first:\n  "
        + "\n  ".join(commands),
        {"runtime": runtime.name, "runtime_id": runtime.runtime_id, "run_first": commands, "why": why},
    )


def service_choice(
    device: str, profile: str, engine: str, launcher: str, runtime: str | None, allow_uncertified: bool
) -> tuple[DeviceChoice, InferenceRuntimeManifestV1]:
    """Check the service choices a command was given; resolve ``--device`` (``auto``: the doctor's certified
    backend) and the runtime (default: the device's best). An uncertified backend needs ``allow_uncertified``."""
    from harness.devices import run_doctor
    from harness.devices.choice import choose_device
    from harness.runtimes import default_runtime

    if profile not in ("baseline", "throughput") or engine not in ("sglang", "fake") or launcher not in ("process", "oci"):
        raise HitchError("usage_error", "profile baseline|throughput, engine sglang|fake, launcher process|oci", {})
    given = get_runtime(runtime) if runtime else None
    report = run_doctor("auto")
    certifiable = given.certifiable if given is not None else None
    choice = choose_device(device, report, engine=engine, allow_uncertified=allow_uncertified, runtime_certifiable=certifiable)
    # the fake engine runs no runtime artifact: its lock names the device's default runtime whatever the launcher
    rt = given or default_runtime(choice.device, launcher=launcher if engine == "sglang" else None)
    if choice.certified and not rt.certifiable:  # the device is certifiable, but this catalog's runtime for it is not
        choice = choose_device(device, report, engine=engine, allow_uncertified=allow_uncertified, runtime_certifiable=False)
    return choice, rt


def device_argv(choice: DeviceChoice) -> list[str]:
    """The flags that repeat this choice in a printed command (the prepare command ``--offline`` names)."""
    return ["--device", choice.device] + (["--allow-uncertified"] if choice.allow_uncertified else [])


def run_image(runtime: InferenceRuntimeManifestV1, engine: str, launcher: str, image: str | None) -> str | None:
    """The pinned image an ``oci`` service runs (None for ``process``): ``--image`` (by digest or image ID,
    never a tag), else the runtime's pinned image (catalog digest or operator pin); the fake engine has no
    catalog image, so it needs ``--image`` (``scripts/ci/build_fake_image.py`` prints its IMAGE_ID)."""
    from harness.launch.oci_config import require_pinned_image
    from harness.runtimes import pinned_image

    if launcher != "oci":
        if image is not None:
            raise HitchError("usage_error", "--image is for --launcher oci", {"image": image})
        return None
    if image is not None:
        return require_pinned_image(image)
    if engine == "fake":
        raise HitchError("usage_error", "--engine fake --launcher oci needs --image (the fake engine image's ID)", {})
    return pinned_image(runtime)


def service_body(
    model: str,
    chosen: DeviceChoice,
    profile: str,
    runtime: InferenceRuntimeManifestV1,
    engine: str,
    launcher: str,
    image: str | None,
) -> dict[str, Any]:
    """The service a daemon request names (prepare, ``hitch run``, ``local serve``); ``image`` only for oci."""
    body: dict[str, Any] = {
        "model": model,
        "device": chosen.device,
        "device_choice": chosen.to_json(),
        "profile": profile,
        "runtime": runtime.runtime_id,
        "engine": engine,
        "launcher": launcher,
    }
    return body | ({"image": image} if image else {})


def service_choice_of(svc: opt.ServiceOptions) -> tuple[DeviceChoice, InferenceRuntimeManifestV1]:
    return service_choice(svc.device, svc.profile, svc.engine, svc.launcher, svc.runtime, svc.allow_uncertified)


def service_body_of(svc: opt.ServiceOptions, chosen: DeviceChoice, rt: InferenceRuntimeManifestV1) -> dict[str, Any]:
    image = run_image(rt, svc.engine, svc.launcher, svc.image)
    return service_body(svc.model, chosen, svc.profile, rt, svc.engine, svc.launcher, image)


def register(app: typer.Typer) -> None:
    @app.command("prepare", help="start the service once, probe it, seal and save its lock; prints the inference_id")
    @cli_command
    def prepare_cmd(
        svc: opt.ServiceOptions,
        context: opt.Context = None,
        offline: opt.Offline = False,
        common: Common = COMMON,
    ) -> None:
        chosen, rt = service_choice_of(svc)
        hroot = common.hroot
        argv = [svc.model, *device_argv(chosen), "--profile", svc.profile, "--runtime", rt.name]
        if svc.engine != "sglang":
            argv += ["--engine", svc.engine]
        if svc.launcher != "process":
            argv += ["--launcher", svc.launcher]
        if svc.engine == "sglang":  # first: --offline names the pin/prepare commands before an unpinned image is refused
            _ensure_runtime(hroot, rt, offline, common.root, argv)
        body = service_body_of(svc, chosen, rt)
        body["context_tokens"] = context
        result = ensure_daemon(hroot).prepare(body)
        result.pop("schema_version", None)
        why = "; ".join(chosen.reasons[:1])
        emit(
            common.as_json,
            result,
            f"inference_id: {result['inference_id']}\nlock: {result['lock_path']}\ndevice: {chosen.device} ({why})",
        )

    @app.command("status", help="services of this root: state, epoch, leases, inference_id (no secrets)")
    @cli_command
    def status_cmd(common: Common = COMMON) -> None:
        hroot = common.hroot
        status = daemon_running(hroot)
        if status is None:
            emit(
                common.as_json,
                {"kind": "local-status", "daemon_running": False, "services": [], "quarantined": []},
                "no daemon is running",
            )
            return
        payload = {
            "kind": "local-status",
            "daemon_running": True,
            "daemon_pid": status.get("pid"),
            "services": status.get("services", []),
            "quarantined": status.get("quarantined", []),
            "gpus": status.get("gpus", []),
        }
        lines = [
            f"{s['service_id']} {s['state']} epoch {s['epoch']} {s['inference_id']} leases {len(s['leases'])}"
            for s in payload["services"]
        ]
        lines += [f"{q.get('service_id')} QUARANTINED: {q.get('reason')}" for q in payload["quarantined"]]
        lines += [
            f"GPU {g.get('uuid')} used by processes Hitch did not start (pids {g.get('foreign_pids') or 'unknown'}): not leased"
            for g in payload["gpus"]
            if g.get("state") == "foreign"
        ]
        emit(common.as_json, payload, "\n".join(lines) or "no services")

    @app.command("stop", help="stop SERVICE (default: every service of this root); live leases need --force")
    @cli_command
    def stop_cmd(
        service: Annotated[str | None, typer.Argument(help="service id (see `hitch local status`)")] = None,
        force: Annotated[bool, typer.Option("--force", help="revoke live leases and stop anyway")] = False,
        common: Common = COMMON,
    ) -> None:
        hroot = common.hroot
        if daemon_running(hroot) is None:
            emit(common.as_json, {"kind": "local-stop", "stopped": [], "daemon_running": False}, "no daemon is running")
            return
        client = DaemonClient(hroot)
        targets = [service] if service else [s["service_id"] for s in client.services()["services"]]
        stopped, busy = [], []
        for sid in targets:
            try:
                if client.stop_service(sid, force=force):
                    stopped.append(sid)
            except HitchError as err:
                if err.code != "inference_in_use":
                    raise
                busy.append(err.details)
        if service and not stopped and not busy:
            raise HitchError("usage_error", f"no live service {service}", {"service_id": service})
        if busy:
            raise HitchError(
                "inference_in_use", "services with live leases were not stopped", {"in_use": busy, "stopped": stopped}
            )
        human = "\n".join(f"stopped {s}" for s in stopped) or "nothing to stop"
        emit(common.as_json, {"kind": "local-stop", "stopped": stopped}, human)

    @app.command("unquarantine", help="after checking a quarantined service's leftover by hand, allow it to start again")
    @cli_command
    def unquarantine_cmd(service: Annotated[str, typer.Argument(help="service id")], common: Common = COMMON) -> None:
        cleared = ensure_daemon(common.hroot).unquarantine(service)
        emit(
            common.as_json,
            {"kind": "local-unquarantine", "service_id": service, "cleared": cleared},
            "cleared" if cleared else "not quarantined",
        )
