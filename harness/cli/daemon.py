"""``hitch daemon start|stop|status``: the per-root daemon that owns the engine services.

``start`` spawns it detached (nothing happens when one answers already); ``stop`` drains and stops every
service, then the daemon exits; ``status`` reports pid, socket and services. The hidden options tune a
daemon for tests and benchmarks (short TTL, fake GPU inventory, capacity).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from harness.cli.output import COMMON, Common, cli_command, emit
from harness.paths import DaemonPaths

app = typer.Typer(no_args_is_help=True, help="the per-root daemon that owns engine services")


def _summary(status: dict[str, Any], paths: DaemonPaths) -> dict[str, Any]:
    return {
        "running": True,
        "pid": status.get("pid"),
        "socket": str(paths.socket),
        "log": str(paths.log),
        "root": status.get("root"),
        "services": status.get("services", []),
        "quarantined": status.get("quarantined", []),
        "recovery": status.get("recovery", []),
        "gateway": status.get("gateway"),  # its metrics URL (loopback): queue, permits, abort verdicts awaited
    }


@app.command("start", help="start the daemon of this root (no-op when it runs already)")
@cli_command
def start_cmd(
    idle_ttl_ms: Annotated[int | None, typer.Option("--idle-ttl-ms", hidden=True)] = None,
    monitor_interval_s: Annotated[float | None, typer.Option("--monitor-interval-s", hidden=True)] = None,
    stop_timeout_s: Annotated[float | None, typer.Option("--stop-timeout-s", hidden=True)] = None,
    fake_gpu: Annotated[list[str] | None, typer.Option("--fake-gpu", hidden=True, help="fake GPU UUID")] = None,
    gpu_lease_dir: Annotated[str | None, typer.Option("--gpu-lease-dir", hidden=True)] = None,
    capacity_cpu: Annotated[int | None, typer.Option("--capacity-cpu", hidden=True)] = None,
    capacity_memory: Annotated[int | None, typer.Option("--capacity-memory", hidden=True)] = None,
    recover_docker: Annotated[bool, typer.Option("--recover-docker", help="also sweep this root's containers")] = False,
    common: Common = COMMON,
) -> None:
    hroot = common.hroot
    args: list[str] = []
    for flag, value in (
        ("--idle-ttl-ms", idle_ttl_ms),
        ("--monitor-interval-s", monitor_interval_s),
        ("--stop-timeout-s", stop_timeout_s),
        ("--gpu-lease-dir", gpu_lease_dir),
        ("--capacity-cpu", capacity_cpu),
        ("--capacity-memory", capacity_memory),
    ):
        if value is not None:
            args += [flag, str(value)]
    for uuid in fake_gpu or []:
        args += ["--fake-gpu", uuid]
    if recover_docker:
        args.append("--recover-docker")
    from harness.app.daemon_client import start_daemon

    status = start_daemon(hroot, args)
    payload = {"kind": "daemon-start", **_summary(status, DaemonPaths(hroot))}
    emit(common.as_json, payload, f"daemon {payload['pid']} serving {payload['root']} on {payload['socket']}")


@app.command(
    "stop",
    help="stop every service, then the daemon; refused while runs hold a service (inference_in_use) unless "
    "--drain-timeout lets them end first or --force ends them (cancelled, operator_stop)",
)
@cli_command
def stop_cmd(
    force: Annotated[bool, typer.Option("--force", help="end live runs (cancelled, operator_stop) and stop anyway")] = False,
    drain_timeout: Annotated[
        float, typer.Option("--drain-timeout", min=0, help="seconds to wait for live runs to end before refusing")
    ] = 0.0,
    common: Common = COMMON,
) -> None:
    by = "hitch daemon stop" + (" --force" if force else "")
    from harness.app.daemon_client import stop_daemon

    stopped = stop_daemon(common.hroot, force=force, drain_timeout_s=drain_timeout, by=by)
    emit(common.as_json, {"kind": "daemon-stop", "stopped": stopped}, "daemon stopped" if stopped else "no daemon was running")


@app.command("status", help="pid, socket and services of this root's daemon")
@cli_command
def status_cmd(common: Common = COMMON) -> None:
    hroot = common.hroot
    paths = DaemonPaths(hroot)
    from harness.app.daemon_client import daemon_running

    status = daemon_running(hroot)
    if status is None:
        emit(common.as_json, {"kind": "daemon-status", "running": False, "socket": str(paths.socket)}, "no daemon is running")
        return
    payload = {"kind": "daemon-status", **_summary(status, paths)}
    lines = [f"daemon {payload['pid']} on {payload['socket']}"]
    lines += [f"  {s['service_id']} {s['state']} epoch {s['epoch']} leases {len(s['leases'])}" for s in payload["services"]]
    lines += [f"  {q.get('service_id')} QUARANTINED: {q.get('reason')}" for q in payload["quarantined"]]
    emit(common.as_json, payload, "\n".join(lines))
