"""What ``hitch local status`` shows of each service (alias, engine, launcher, device, engine URL, uptime, owners
and their runs) and ``hitch local logs [SERVICE] [--follow] [--daemon]``: read from the daemon's answer and the
service's own records (``state.json``, ``events.jsonl``, ``engine.log``); nothing here writes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import units
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError
from harness.paths import DaemonPaths, HitchRoot

if TYPE_CHECKING:  # the status reads import what they read: `hitch local --help` loads none of them
    from harness.service.state_store import ServiceStateStore

__all__ = ["describe_service", "register", "service_lines", "status_payload"]

ENGINE_LOG = "engine.log"


def _ready_event(store: ServiceStateStore, epoch: int) -> tuple[float | None, str | None]:
    """When the service's current epoch became ready and the engine's URL it answered on."""
    for event in reversed(store.events()):
        if event.epoch == epoch and event.event == "inference.ready":
            url = event.details.get("base_url")
            return event.timestamp, url if isinstance(url, str) else None
    return None, None


def describe_service(hroot: HitchRoot, service: dict[str, Any], aliases: dict[str, str]) -> dict[str, Any]:
    """The daemon's view of one service plus what a person asks first: which model, where, since when, for whom."""
    from harness.app.run_store import RunStore
    from harness.lock import load_sealed_lock
    from harness.service.state_store import ServiceStateStore

    store = ServiceStateStore(hroot, service["service_id"])
    record = store.read()
    choice = service.get("choice") or {}
    model_id = device = runtime_id = profile = None
    try:
        lock = load_sealed_lock(hroot, service["inference_id"])
        model_id, device, runtime_id, profile = (
            lock.model_id, lock.execution.platform.backend, lock.runtime_id, lock.profile,
        )  # fmt: skip
    except HitchError:
        pass
    if record is not None:
        device = record.allocation.device
    names = sorted(a for a, m in aliases.items() if m == model_id)
    ready_at, url = _ready_event(store, int(service["epoch"]))
    runs = [
        {"run_id": r.run_id, "status": r.status, "harness": r.harness or "serve"}
        for r in RunStore(hroot).live()
        if r.service_id == service["service_id"]
    ]
    return {
        **service,
        "model": f"local/{names[0]}" if names else (f"local/{model_id}" if model_id else None),
        "model_id": model_id,
        "engine": choice.get("engine"),
        "launcher": choice.get("launcher"),
        "device": device,
        "runtime_id": runtime_id,
        "profile": profile,
        "engine_url": url,
        "ready_at": ready_at,
        "ready": units.iso_utc(ready_at) if ready_at is not None else None,
        "uptime_s": round(time.time() - ready_at, 3) if ready_at is not None else None,
        "runs": runs,
        "engine_log": str(store.dir / ENGINE_LOG),
    }


def service_lines(s: dict[str, Any]) -> list[str]:
    """One service for a person: a headline and indented facts."""
    owners = ", ".join(s.get("owners") or []) or "none (idle)"
    runs = ", ".join(f"{r['run_id']} ({r['harness']}, {r['status']})" for r in s["runs"]) or "none"
    up = f"{units.duration(s['uptime_s'])} (ready since {s['ready']})" if s["uptime_s"] is not None else "not ready"
    return [
        f"{s['service_id']}  {s['state']}  {s['model'] or '?'}",
        f"  engine:    {s['engine'] or '?'} ({s['launcher'] or '?'} launcher) on {s['device'] or '?'}"
        + (f" GPU {s['gpu_uuid']}" if s.get("gpu_uuid") else "")
        + f", profile {s['profile'] or '?'}, epoch {s['epoch']}",
        f"  url:       {s['engine_url'] or '-'}  (the engine's own; clients use the gateway URL `hitch local serve` prints)",
        f"  uptime:    {up}",
        f"  owners:    {owners}",
        f"  runs:      {runs}",
        f"  inference: {s['inference_id']}",
        f"  log:       {s['engine_log']}  (hitch local logs {s['service_id']})",
    ]


def _service_dirs(hroot: HitchRoot) -> list[Path]:
    if not hroot.services.is_dir():
        return []
    return sorted((p for p in hroot.services.iterdir() if (p / ENGINE_LOG).is_file()), key=lambda p: p.stat().st_mtime)


def _log_path(hroot: HitchRoot, service: str | None, daemon: bool) -> Path:
    """The daemon's log, the named service's engine log, or the only (else the most recently written) one."""
    if daemon:
        if service is not None:
            raise HitchError("usage_error", "--daemon shows the daemon's log: drop SERVICE", {"service": service})
        return DaemonPaths(hroot).dir / "daemon.log"
    found = _service_dirs(hroot)
    if not found:
        raise HitchError("usage_error", "no service of this root has a log yet (see `hitch local status`)", {})
    if service is None:
        return found[-1] / ENGINE_LOG
    matches = [p for p in found if p.name == service] or [p for p in found if p.name.startswith(service)]
    if len(matches) != 1:
        choices = [p.name for p in found]
        why = "is ambiguous" if matches else "is not a service of this root"
        raise HitchError("usage_error", f"SERVICE {service} {why}; choose one of the listed", {"choices": choices})
    return matches[0] / ENGINE_LOG


def _follow(path: Path, offset: int) -> None:
    """Print what is appended to ``path`` until Ctrl-C (SIGINT ends it with exit 0)."""
    try:
        while True:
            with path.open("rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            if chunk:
                offset += len(chunk)
                sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                sys.stdout.flush()
            else:
                time.sleep(0.5)
    except KeyboardInterrupt:
        return


def register(app: typer.Typer) -> None:
    @app.command("logs", help="print a service's engine log (default: the latest written) or the daemon's; --follow")
    @cli_command
    def logs_cmd(
        service: Annotated[str | None, typer.Argument(help="service id or its unique prefix (see `hitch local status`)")] = None,
        follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing what is appended, until Ctrl-C")] = False,
        daemon: Annotated[bool, typer.Option("--daemon", help="the daemon's own log instead")] = False,
        common: Common = COMMON,
    ) -> None:
        if follow and common.as_json:
            raise HitchError("usage_error", "--follow prints the log as it grows: drop --json", {})
        path = _log_path(common.hroot, service, daemon)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise HitchError("usage_error", f"no such file: {path}", {"path": str(path), "error": exc.strerror}) from exc
        if common.as_json:
            text = data.decode("utf-8", errors="replace")
            emit(True, {"kind": "local-logs", "path": str(path), "size_bytes": len(data), "text": text})
            return
        sys.stderr.write(f"==> {path} ({units.size(len(data))})\n")
        sys.stdout.write(data.decode("utf-8", errors="replace"))
        sys.stdout.flush()
        if follow:
            _follow(path, len(data))


def status_payload(hroot: HitchRoot) -> tuple[dict[str, Any], str]:
    """``local status``: the payload and its human form."""
    from harness.app.daemon_client import daemon_running
    from harness.store import read_aliases

    status = daemon_running(hroot)
    if status is None:
        return {"kind": "local-status", "daemon_running": False, "services": [], "quarantined": []}, "no daemon is running"
    aliases = read_aliases(hroot)
    services = [describe_service(hroot, s, aliases) for s in status.get("services", [])]
    payload = {
        "kind": "local-status",
        "daemon_running": True,
        "daemon_pid": status.get("pid"),
        "services": services,
        "quarantined": status.get("quarantined", []),
        "gpus": status.get("gpus", []),
        "resources": status.get("resources"),
    }
    lines = [line for s in services for line in service_lines(s)]
    lines += [
        f"trial {h['run_id']}: {h['held']['cpu_quota_millis'] / 1000:g} cpus, {units.size(h['held']['memory_bytes'])}"
        for h in (payload["resources"] or {}).get("holders", [])
        if h["kind"] == "trial"
    ]
    lines += [f"{q.get('service_id')} QUARANTINED: {q.get('reason')}" for q in payload["quarantined"]]
    lines += [
        f"GPU {g.get('uuid')} used by processes Hitch did not start (pids {g.get('foreign_pids') or 'unknown'}): not leased"
        for g in payload["gpus"]
        if g.get("state") == "foreign"
    ]
    return payload, "\n".join(lines) or f"daemon {status.get('pid')} runs no services"
