"""``hitch local prepare|status|stop|unquarantine``: services of this root, always through its daemon.

``prepare`` (:func:`harness.app.service.prepare_service`) installs a missing runtime first (progress on stderr)
unless ``--offline``, which fails at once with ``inference_runtime_unavailable`` and the exact commands to run
first; then the daemon (started on demand) runs the prepare flow and this prints the sealed ``inference_id``.
``status`` and ``stop`` never touch state files themselves.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from harness.cli import options as opt
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command("prepare", help="start the service once, probe it, seal and save its lock; prints the inference_id")
    @cli_command
    def prepare_cmd(
        model: opt.ModelArg,
        svc: opt.ServiceOptions = opt.DEFAULT_SERVICE,
        context: opt.Context = None,
        offline: opt.Offline = False,
        common: Common = COMMON,
    ) -> None:
        from harness.app.service import prepare_service
        from harness.app.spec import ServiceSpec
        from harness.lock import DEFAULT_GENERATION, describe_sampling

        ask = ServiceSpec.of(model=model, **dataclasses.asdict(svc))
        chosen, result = prepare_service(
            common.hroot, ask, context_tokens=context, offline=offline, root_flag=common.root, as_json=common.as_json
        )
        result.pop("schema_version", None)
        why = "; ".join(chosen.reasons[:1])
        profile = ask.generation or DEFAULT_GENERATION
        result["generation_profile"] = profile.model_dump(mode="json", include={"name", "version", "source"})
        lines = [
            f"inference_id: {result['inference_id']}",
            f"lock: {result['lock_path']}",
            f"device: {chosen.device} ({why})",
            f"sampling: {describe_sampling(profile.sampling, profile)}",
        ]
        emit(common.as_json, result, "\n".join(lines))

    @app.command(
        "status",
        help="services of this root: model alias, engine, launcher, device, engine URL, uptime, owners and runs "
        "(no secrets), and the resources held",
    )
    @cli_command
    def status_cmd(common: Common = COMMON) -> None:
        from harness.cli.local_views import status_payload

        payload, human = status_payload(common.hroot)
        emit(common.as_json, payload, human)

    @app.command("stop", help="stop SERVICE (default: every service of this root); live leases need --force")
    @cli_command
    def stop_cmd(
        service: Annotated[str | None, typer.Argument(help="service id (see `hitch local status`)")] = None,
        force: Annotated[bool, typer.Option("--force", help="revoke live leases and stop anyway")] = False,
        common: Common = COMMON,
    ) -> None:
        from harness.app.daemon_client import DaemonClient, daemon_running

        hroot = common.hroot
        if daemon_running(hroot) is None:
            emit(common.as_json, {"kind": "local-stop", "stopped": [], "daemon_running": False}, "no daemon is running")
            return
        client = DaemonClient(hroot)
        targets = [service] if service else [s["service_id"] for s in client.services()["services"]]
        stopped, busy = [], []
        for sid in targets:
            try:
                if client.stop_service(sid, force=force, by=f"hitch local stop {sid}" + (" --force" if force else "")):
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
        from harness.app.daemon_client import ensure_daemon

        cleared = ensure_daemon(common.hroot).unquarantine(service)
        emit(
            common.as_json,
            {"kind": "local-unquarantine", "service_id": service, "cleared": cleared},
            "cleared" if cleared else "not quarantined",
        )
