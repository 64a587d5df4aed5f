"""``hitch run list`` and ``hitch run show ID``: what the root's runs were, read from their records
(``runs/<id>/run.json``) and evidence (``inference/attempts.jsonl``: one row per model request, with its tokens).

Human output uses human units (:mod:`harness.cli.units`); ``--json`` keeps the numbers and adds ISO-8601 strings.
"""

from __future__ import annotations

import difflib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import units
from harness.cli.options import check_choice
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

if TYPE_CHECKING:  # the commands read the records: `hitch run --help` loads no contract
    from harness.contracts.run import RunRecordV1
    from harness.paths import HitchRoot

__all__ = ["register", "require_record", "run_summary", "show_human"]

# the contract's RunStatus, spelled out so the help needs no contract (tests/harness/cli/test_help_imports.py holds
# them equal)
RUN_STATUSES: tuple[str, ...] = ("admitted", "preparing", "running", "completed", "failed", "cancelled", "interrupted")


def _usage(attempts: Path) -> dict[str, int]:
    """Requests and token totals of a run's attempt rows (none yet: zeros)."""
    out = {"requests": 0, "input_tokens": 0, "output_tokens": 0}
    try:
        lines = attempts.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        out["requests"] += 1
        out["input_tokens"] += int(row.get("input_tokens") or 0)
        out["output_tokens"] += int(row.get("output_tokens") or 0)
    return out


def _model(hroot: HitchRoot, record: RunRecordV1, aliases: dict[str, str]) -> str:
    """The model as the run was asked for it; with ``--inference``, the lock's model under its alias if it has one."""
    asked = record.request.get("model")
    if isinstance(asked, str):
        return asked
    try:
        model_id = json.loads((hroot.run_inference_dir(record.run_id) / "lock.json").read_bytes())["model_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return "-"
    names = sorted(a for a, m in aliases.items() if m == model_id)
    return f"local/{names[0]}" if names else f"local/{model_id}"


def run_summary(hroot: HitchRoot, record: RunRecordV1, aliases: dict[str, str] | None = None) -> dict[str, Any]:
    """One run as ``run list`` shows it (numbers, plus ISO strings for people)."""
    end = record.finished_at if record.finished_at is not None else time.time()
    usage = _usage(hroot.run_inference_dir(record.run_id) / "attempts.jsonl")
    return {
        "run_id": record.run_id,
        "harness": record.harness or "serve",
        "model": _model(hroot, record, aliases if aliases is not None else _aliases(hroot)),
        "status": record.status,
        "error_code": record.error.code if record.error is not None else None,
        "inference_id": record.inference_id,
        "device": record.request.get("device"),
        "started_at": record.admitted_at,
        "started": units.iso_utc(record.admitted_at),
        "finished_at": record.finished_at,
        "duration_s": round(end - record.admitted_at, 3),
        **usage,
        "tokens": usage["input_tokens"] + usage["output_tokens"],
        "evidence": str(hroot.run_inference_dir(record.run_id)),
    }


def _aliases(hroot: HitchRoot) -> dict[str, str]:
    from harness.store import read_aliases

    return read_aliases(hroot)


def _records(hroot: HitchRoot) -> list[RunRecordV1]:
    from harness.app.run_store import RunStore

    if not hroot.runs.is_dir():
        return []
    store = RunStore(hroot)
    found = [store.read(path.name) for path in hroot.runs.iterdir() if (path / "run.json").is_file()]
    return sorted((r for r in found if r is not None), key=lambda r: (r.admitted_at, r.run_id))


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("RUN", "HARNESS", "MODEL", "STATUS", "STARTED (UTC)", "DURATION", "REQUESTS", "TOKENS")
    cells = [
        (
            r["run_id"],
            r["harness"],
            r["model"],
            r["status"] + (f" ({r['error_code']})" if r["error_code"] else ""),
            r["started"],
            units.duration(r["duration_s"]),
            str(r["requests"]),
            str(r["tokens"]),
        )
        for r in rows
    ]
    widths = [max(len(str(c[i])) for c in [header, *cells]) for i in range(len(header))]
    return "\n".join("  ".join(str(c[i]).ljust(widths[i]) for i in range(len(header))).rstrip() for c in [header, *cells])


def show_human(hroot: HitchRoot, record: RunRecordV1) -> str:
    """``run show``: the run for a person: model, identity, device, status and why, timings, usage, evidence."""
    s = run_summary(hroot, record)
    lines = [
        f"run:        {s['run_id']} ({s['harness']})",
        f"model:      {s['model']}",
        f"inference:  {s['inference_id'] or '-'}",
        f"device:     {s['device'] or '-'}  engine {record.request.get('engine', '-')}, "
        f"launcher {record.request.get('launcher', '-')}, profile {record.request.get('profile', '-')}",
        f"status:     {s['status']}",
    ]
    if record.error is not None:
        lines.append(f"why:        {record.error.code}: {record.error.message}")
    lines.append(f"started:    {s['started']}")
    lines.append(f"finished:   {units.iso_utc(record.finished_at)}  (duration {units.duration(s['duration_s'])})")
    previous = record.admitted_at
    phases = []
    for step in record.history[1:]:
        phases.append(f"{step.status} +{units.duration(step.at - previous)}")
        previous = step.at
    if phases:
        lines.append(f"phases:     admitted -> {', '.join(phases)}")
    lines.append(
        f"usage:      {s['requests']} request(s), {s['input_tokens']} input + {s['output_tokens']} output tokens = {s['tokens']}"
    )
    if record.rerun_of:
        lines.append(f"rerun of:   {record.rerun_of}")
    lines.append(f"evidence:   {s['evidence']}")
    return "\n".join(lines)


def register(run_app: typer.Typer) -> None:
    @run_app.command("list", help="the runs of this root: id, harness, model, status, start (UTC), duration, requests, tokens")
    @cli_command
    def list_cmd(
        status: Annotated[
            str | None, typer.Option("--status", help="only runs in this status: " + " | ".join(RUN_STATUSES))
        ] = None,
        model: Annotated[str | None, typer.Option("--model", help="only runs of this model (local/ALIAS or ALIAS)")] = None,
        common: Common = COMMON,
    ) -> None:
        if status is not None:
            check_choice("--status", status, RUN_STATUSES)
        from harness.store import read_aliases

        hroot = common.hroot
        aliases = read_aliases(hroot)
        rows = [run_summary(hroot, r, aliases) for r in _records(hroot) if status is None or r.status == status]
        if model is not None:
            wanted = model if model.startswith("local/") else f"local/{model}"
            rows = [r for r in rows if r["model"] == wanted or r["model"] == f"local/{aliases.get(wanted[6:], '')}"]
        human = _table(rows) if rows else "no runs" + (" match" if status or model else " in this root")
        emit(common.as_json, {"kind": "run-list", "runs": rows}, human)

    @run_app.command("show", help="one run for a person: model, inference id, device, status and why, timings, usage")
    @cli_command
    def show_cmd(
        run_id: Annotated[str, typer.Argument(help="the run id (see `hitch run list`)")], common: Common = COMMON
    ) -> None:
        hroot = common.hroot
        record = require_record(hroot, run_id)
        payload = {
            "kind": "run-record",
            "run_id": record.run_id,
            "record": record.to_json_dict(),
            "summary": run_summary(hroot, record),
            "evidence": str(hroot.run_inference_dir(record.run_id)),
        }
        emit(common.as_json, payload, show_human(hroot, record))


def require_record(hroot: HitchRoot, run_id: str) -> RunRecordV1:
    """The record of ``run_id``, or ``run_not_found`` naming the closest known run id."""
    from harness.app.run_store import RunStore

    record = RunStore(hroot).read(run_id)
    if record is None:
        known = [p.name for p in hroot.runs.iterdir()] if hroot.runs.is_dir() else []
        close = difflib.get_close_matches(run_id, known, n=1)
        details: dict[str, Any] = {"run_id": run_id}
        if close:
            details["did_you_mean"] = close[0]
        hint = f" (did you mean {close[0]}?)" if close else "; `hitch run list` shows the runs"
        raise HitchError("run_not_found", f"no run {run_id!r} in this root{hint}", details)
    return record
