"""Result collection: a check's test reports (from this process or, under xdist, from the workers) become its
:class:`~certify.evaluate.CheckResult`, its metrics, evidence and timeline spans in the session's
:class:`~certify.state.CertifyState`.

Results travel as ``user_properties`` on the reports (``certify_check``, ``certify_detail``, ``certify_metric``,
``certify_evidence``, ``certify_spans``, ``certify_refused``); the phases of one check merge into one result.

Example::

    record_report(config.stash[STATE], report)  # certify.plugin's pytest_runtest_logreport
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from certify.evaluate import CheckResult
from certify.recorder import shown_status
from certify.state import CertifyState

__all__ = ["record_report"]


def record_report(state: CertifyState, report: pytest.TestReport) -> None:
    cid = next((v for k, v in report.user_properties if k == "certify_check"), None)
    if cid is None:
        return
    state.active = True
    for key, value in report.user_properties:
        if key == "certify_spans":
            state.spans.extend(cast("list[dict[str, Any]]", value))
    status: str | None = None
    if report.when == "call":
        status = "passed" if report.passed else "skipped" if report.skipped else "failed"
    elif report.when == "setup" and not report.passed:
        status = "skipped" if report.skipped else "failed"
    elif report.when == "teardown" and report.failed:
        status = "failed"
    if status is None:
        return
    details: dict[str, Any] = {}
    for key, value in report.user_properties:
        if key == "certify_refused":
            state.refused.update(cast("list[str]", value))
    for key, value in report.user_properties:
        if key == "certify_detail":
            details.update(cast("dict[str, Any]", value))
        elif key == "certify_metric":
            state.metrics.update(_unrefused(state.refused, cast("dict[str, Any]", value)))
        elif key == "certify_evidence":
            state.evidence.update(cast("dict[str, dict[str, Any]]", value))
    status = shown_status(status, details)
    if status not in ("passed", "not_applicable"):
        details["reason"] = _reason(report)
    result = CheckResult(str(cid), status, float(report.duration), details)  # type: ignore[arg-type]
    previous = state.results.get(result.id)
    state.results[result.id] = result if previous is None else previous.merge(result)


def _unrefused(refused: set[str], metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics less the figures of refused timings, also inside a suite's aggregate (``_lifecycle``...)."""
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        if name in refused:
            continue
        if name.startswith("_") and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in refused}
        out[name] = value
    return out


def _reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])[:500]
    text = getattr(report, "longreprtext", "") or ""
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
    return ("\n".join(lines[:8]) or text[-500:])[:1000]
