"""The controlling process's end of a certify session: the session-end checks of every suite that ran
(:func:`run_session_end_checks`, :func:`certify.registry.at_session_end`: the secrets scan), then the timeline, the
evaluation and the outputs (:func:`finish`: results, the signed entry, the HTML pages) and the summary lines the
terminal shows.

Example::

    finish(session, config.stash[STATE])  # certify.plugin's pytest_sessionfinish, controller only
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from certify.evaluate import CheckResult
from certify.options import CertifyOptions
from certify.recorder import EndRecorder, shown_status
from certify.registry import Check, session_end_checks
from certify.secrets_scan import forget
from certify.state import CertifyState, resolved_options
from certify.timeline import build_timeline, cpu_sample, cpu_usage, drain, record

__all__ = ["finish", "run_session_end_checks"]


def run_session_end_checks(state: CertifyState, opts: CertifyOptions, checks: list[tuple[Check, Any]]) -> list[str]:
    """Run the session-end checks of every suite that has a result in this session (a run that selected none
    of a suite's tests does not run its session-end checks either); their results join ``state.results``.
    The session's secrets ledger is removed afterwards whatever ran. Returns a line per failed check."""
    from certify.session import SessionEnd, secrets_ledger

    ledger = secrets_ledger(opts, state.session_key)
    session_file = opts.report_dir / "session.json"
    facts: dict[str, Any] = json.loads(session_file.read_text()) if session_file.is_file() else {}
    end = SessionEnd(opts, facts, ledger)
    ran = {cid.split(".", 1)[0] for cid in state.results}
    failed: list[str] = []
    try:
        for spec, fn in checks:
            if spec.suite not in ran:
                continue
            recorder = EndRecorder()
            started, wall_start = time.monotonic(), time.time()
            status = "passed"
            if not spec.applies(str(opts.engine), opts.device):
                why = f": {spec.reason}" if spec.reason else ""
                status = "skipped"
                recorder.details["reason"] = f"{spec.id} does not apply to engine={opts.engine} device={opts.device}{why}"
            else:
                try:
                    fn(end, recorder)
                except Exception as exc:  # a failed assertion, or a crash of the check: the check fails
                    status = "failed"
                    recorder.details["reason"] = f"{type(exc).__name__}: {exc}"[:1000]
                    failed.append(f"{spec.id} (at session end) failed: {recorder.details['reason']}")
            status = shown_status(status, recorder.details)
            state.metrics.update(recorder.metrics)
            state.spans.append(
                record("check", spec.id, wall_start, time.time(), phase="session_end", check=spec.id, engine="none", keep=False)
            )
            result = CheckResult(spec.id, status, time.monotonic() - started, recorder.details)  # type: ignore[arg-type]
            previous = state.results.get(spec.id)
            state.results[spec.id] = result if previous is None else previous.merge(result)
    finally:
        forget(ledger)
    return failed


def finish(session: pytest.Session, state: CertifyState) -> None:
    """The session-end checks, the timeline, the evaluation and the outputs; ``state.summary`` says what came of
    them and ``session.exitstatus`` fails when they did (a failed level never exits 0)."""
    from certify.outputs import finish_session

    started = time.monotonic()
    opts = resolved_options(session.config)
    if state.blocked:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    end_failures: list[str] = []
    try:
        if not state.blocked:
            end_failures = run_session_end_checks(state, opts, session_end_checks())
            if end_failures and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED  # as a failed test would
        timeline = build_timeline(
            state.started_at, time.time(), [*state.spans, *drain()], cpu_usage(state.cpu_first, cpu_sample())
        )
        evaluation, state.summary = finish_session(
            opts,
            state.results,
            state.metrics,
            state.evidence,
            state.daemon_was_running,
            session_error=state.blocked,
            timeline=timeline,
        )
        if state.blocked:  # one clear line first; the "did not run" reasons of every check say nothing more
            state.summary = [f"STOPPED before the suites: {state.blocked}"] + [
                line for line in state.summary if not line.startswith("  - ")
            ]
        if evaluation.level == "failed" and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a failed level never exits 0
        state.summary = end_failures + state.summary
    except Exception as exc:  # the run's outputs are part of its verdict: a failure here fails the session
        import traceback

        state.summary = [f"writing the certification outputs failed: {type(exc).__name__}: {exc}", traceback.format_exc()]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    state.summary.append(f"outputs written in {time.monotonic() - started:.1f} s")
