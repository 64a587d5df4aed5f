"""What a certification session leaves behind, written by the controlling process once every check ran.

``finish_session``: evaluate (:mod:`certify.evaluate`) → ``results.json`` (the predicate plus the raw
figures) → the signed entry (an in-toto Statement in a DSSE envelope, :mod:`catalog.signing`) → the HTML
pages (:mod:`reports.builder`; the session's timeline, when the plugin measured one, is in ``results.json``
beside the predicate and on the run page) → teardown of the session's engine service (and of the daemon when the
session started it). Returns the lines the terminal summary prints.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from catalog.evidence import EVIDENCE_DIR, write_index
from catalog.signing import (
    build_statement,
    decode_statement_unverified,
    dev_keys_dir,
    ensure_dev_key,
    load_entry,
    payload_bytes,
    sign_envelope,
    subjects_from_predicate,
    trusted_keys_dir,
    write_entry,
)
from certify.evaluate import CheckResult, Evaluation, Platform, evaluate
from certify.options import CertifyOptions
from certify.registry import all_checks
from harness.app.daemon_client import DaemonClient, daemon_running, stop_daemon
from harness.app.inventory import DoctorReportV1, machine_facts
from harness.app.locks import runtime_named
from harness.contracts.certification import (
    CertificationCheckV1,
    CertificationModelV1,
    CertificationResultV1,
    EvidenceFileV1,
    ReproducesV1,
)
from harness.contracts.margins import DEFAULT_MARGINS
from harness.contracts.timeline import CertificationTimelineV1
from harness.ids import digest_bytes
from harness.paths import atomic_write_json
from harness.project import project_commit
from reports.builder import build_matrix, build_run_page
from reports.timeline import timeline_summary

__all__ = ["SUITE_VERSION", "finish_session", "machine_facts", "project_commit"]

SUITE_VERSION = "1"


def _platform(
    session: dict[str, Any] | None, opts: CertifyOptions, doctor: DoctorReportV1, session_error: str | None
) -> Platform:
    verdict = doctor.devices.get("cuda" if opts.device == "cuda" else "cpu")
    platform_ok = bool(verdict is not None and verdict.certifiable)
    platform_reasons = tuple(verdict.reasons) if verdict is not None else (f"doctor has no verdict for {opts.device}",)
    runtime_ok = False
    runtime_reasons: tuple[str, ...] = ("no runtime recorded",)
    runtime_id = (session or {}).get("runtime_id") or opts.runtime
    if runtime_id:
        try:
            rt = runtime_named(str(runtime_id))
            runtime_ok = rt.certifiable and rt.pinned
            runtime_reasons = () if runtime_ok else (f"runtime {rt.name} is not a pinned certifiable catalog runtime",)
        except Exception as exc:
            runtime_reasons = (f"runtime {runtime_id}: {exc}",)
    return Platform(
        engine=str((session or {}).get("engine") or opts.engine),
        device=opts.device,
        platform_certifiable=platform_ok,
        platform_reasons=platform_reasons,
        runtime_certifiable=runtime_ok,
        runtime_reasons=runtime_reasons,
        session_error=session_error,
    )


def _runtime_facts(runtime_id: str) -> tuple[str, str | None]:
    """(name, pinned_by) of the runtime: ``operator`` when its digest is an operator pin, else ``catalog``."""

    try:
        runtime = runtime_named(runtime_id) if runtime_id else None
    except Exception:  # an unknown runtime keeps its id only
        runtime = None
    return (runtime.name, runtime.pinned_by or "catalog") if runtime is not None else ("", None)


def _reproduces(opts: CertifyOptions) -> ReproducesV1 | None:
    """What ``--reproduces ENTRY`` names: the entry's signed payload digest and the lock both ran."""
    if opts.reproduces is None:
        return None

    envelope = load_entry(opts.reproduces)
    predicate = decode_statement_unverified(envelope).get("predicate") or {}
    return ReproducesV1(entry_sha256=digest_bytes(payload_bytes(envelope)), inference_id=predicate.get("inference_id"))


def build_predicate(
    opts: CertifyOptions,
    session: dict[str, Any] | None,
    evaluation: Evaluation,
    hardware: dict[str, Any],
    metrics: dict[str, Any],
    evidence: dict[str, str],
) -> CertificationResultV1:
    s = session or {}
    runtime_id = str(s.get("runtime_id") or opts.runtime or "") or None
    runtime_name, pinned_by = _runtime_facts(runtime_id or "")
    launcher = s.get("launcher") or opts.launcher
    return CertificationResultV1(
        level=evaluation.level,
        reasons=evaluation.reasons,
        to_certify=evaluation.to_certify,
        suite_version=SUITE_VERSION,
        project_commit=project_commit(),
        device=opts.device,  # resolved to cpu|cuda before any session
        engine=str(s.get("engine") or opts.engine),
        launcher=str(launcher) if launcher else None,
        runtime_id=runtime_id if runtime_id and runtime_id.startswith("sha256:") else None,
        runtime_name=runtime_name or None,
        runtime_pinned_by=pinned_by,
        model_id=s.get("model_id") or None,
        model=CertificationModelV1.model_validate(s["model"]) if s.get("model") else None,
        inference_id=s.get("inference_id") or None,
        profile=opts.profile,
        hardware=hardware,
        checks=[CertificationCheckV1.model_validate(row) for row in evaluation.checks],
        metrics={k: v for k, v in metrics.items() if not k.startswith("_")},
        evidence=evidence,
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        reproduces=_reproduces(opts),
        margins=dict(DEFAULT_MARGINS),  # what a reproduction of this entry is decided by (harness.compare.decide)
    )


def _keep_evidence(opts: CertifyOptions, files: dict[str, dict[str, Any]], lines: list[str]) -> dict[str, str]:
    """The predicate's evidence map; writes the index beside the blobs the checks stored."""

    entries = [EvidenceFileV1.model_validate(f) for f in files.values()]
    if entries:
        index = write_index(opts.report_dir / EVIDENCE_DIR, entries)
        lines.append(f"evidence: {len(entries)} file(s), index {index}")
    return {e.name: e.digest for e in entries}


def _sign(opts: CertifyOptions, predicate: dict[str, Any], lines: list[str]) -> Path | None:
    subjects = subjects_from_predicate(predicate)
    if not subjects:  # in-toto needs a subject: a session that never had an identity cannot be signed
        lines.append("no signed entry: the session never reached a runtime/model/lock identity")
        return None
    key = opts.sign_key or ensure_dev_key(opts.root)
    envelope = sign_envelope(build_statement(predicate, subjects), key)
    path: Path = write_entry(envelope, opts.report_dir)
    lines.append(f"signed entry: {path}")
    return path


def _pages(opts: CertifyOptions, results: dict[str, Any], lines: list[str]) -> None:
    run_page = build_run_page(results, opts.report_dir)
    lines.append(f"run report: {run_page}")
    keys = [trusted_keys_dir(), dev_keys_dir(opts.root)]
    matrix = build_matrix(opts.report_dir, keys, opts.report_dir)
    lines.append(f"support matrix: {matrix}")


def _teardown(opts: CertifyOptions, session: dict[str, Any] | None, daemon_was_running: bool, lines: list[str]) -> None:
    if daemon_running(opts.root) is None:
        return
    if not daemon_was_running:
        stop_daemon(opts.root, force=True)
        lines.append("engine and daemon stopped (this session started them)")
        return
    if session and session.get("service_id"):
        try:
            # not forced: a lease someone else holds on the same service (hitch local serve) keeps it running
            DaemonClient(opts.root).stop_service(str(session["service_id"]), force=False)
            lines.append(f"engine service {session['service_id']} stopped")
        except Exception as exc:
            lines.append(f"engine service {session['service_id']} left running: {exc}")


def finish_session(
    opts: CertifyOptions,
    results: dict[str, CheckResult],
    metrics: dict[str, Any],
    evidence: dict[str, dict[str, Any]],
    daemon_was_running: bool,
    *,
    session_error: str | None = None,
    timeline: CertificationTimelineV1 | None = None,
) -> tuple[Evaluation, list[str]]:
    """Evaluate, write the outputs; returns the evaluation (its level decides the exit status) and summary lines.

    ``session_error`` fails the level whatever ran (a session stopped before its suites says why here)."""
    lines: list[str] = [f"engine choice: {opts.engine} via {opts.launcher} ({opts.choice_reason})"]
    session_file = opts.report_dir / "session.json"
    session: dict[str, Any] | None = json.loads(session_file.read_text()) if session_file.exists() else None
    error = session_error
    if error is None and session is None:
        error = "the session engine never became usable (no session.json)"
    hardware, doctor = machine_facts(opts.device)
    platform = _platform(session, opts, doctor, error)
    evaluation = evaluate(all_checks(), results, platform)
    opts.report_dir.mkdir(parents=True, exist_ok=True)
    kept = _keep_evidence(opts, evidence, lines)
    predicate = build_predicate(opts, session, evaluation, hardware, metrics, kept).to_json_dict()
    lifecycle = dict(metrics.get("_lifecycle") or {})
    start = (session or {}).get("engine_start")
    if start:  # how the session's engine became ready, the wait for it to go idle before the flush included
        lifecycle["engine_start"] = start
    full = {**predicate, "session": session, "overhead": metrics.get("_overhead"), "lifecycle": lifecycle or None}
    if timeline is not None:  # outside the predicate: the signed entry claims what it claimed before
        full["timeline"] = timeline.to_json_dict()
        lines.extend(timeline_summary(timeline))
    atomic_write_json(opts.report_dir / "results.json", full)
    lines.append(f"level: {evaluation.level}")
    lines.extend(f"  - {reason}" for reason in evaluation.reasons[:20])
    lines.append(f"results: {opts.report_dir / 'results.json'}")
    try:
        _sign(opts, predicate, lines)
        _pages(opts, full, lines)
    finally:
        _teardown(opts, session, daemon_was_running, lines)
    return evaluation, lines
