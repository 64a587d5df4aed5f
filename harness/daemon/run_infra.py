"""Did the engine fail under a run? The infrastructure verdict a run's end takes into account (spec §9.2).

An engine that exits, is killed for memory or fails its health checks while a run is live is an
infrastructure failure of that run — never the harness's result, and for an evaluation trial never a
reward of 0. :func:`engine_failure` looks in two places, in this order:

1. the run's own attempt rows (the gateway's evidence): a request that failed with
   ``inference_process_exited``, ``inference_oom`` or ``inference_engine_unhealthy`` met a dead engine;
2. the service's lifecycle events: an ``inference.failed`` of the run's service *epoch* (the supervisor's
   monitor saw the exit, the OOM kill or the failed health checks; the run could only have acquired that
   epoch while it was ready, so the failure happened while the run held it).

A request that failed otherwise (``inference_upstream_failed``: a cut stream, an in-band error) on an
engine that stayed up is the harness's to handle, and is not counted here. The daemon applies the verdict
when a run ends (:meth:`harness.daemon.runs.RunService.finish`): a run its harness reports completed or
failed ends ``failed`` with the engine's code. :data:`harness.errors.ENGINE_FAILURE_CODES` is what an evaluation retries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from harness.contracts.events import LifecycleEventV1
from harness.errors import ENGINE_FAILURE_CODES, HitchError

__all__ = ["engine_failure"]


def _failed_rows(rows_file: Path) -> Iterable[dict[str, object]]:
    """The rows with an engine failure code, read as a stream (a long run's file is never held whole); only lines
    naming such a code are parsed."""
    needles = [code.encode() for code in ENGINE_FAILURE_CODES]
    try:
        handle = rows_file.open("rb")
    except FileNotFoundError:
        return
    with handle:
        for line in handle:
            if not any(n in line for n in needles):
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line: the writer's own verdict covers it (evidence incomplete)
            if isinstance(row, dict) and row.get("error_code") in ENGINE_FAILURE_CODES:
                yield row


def engine_failure(
    rows_file: Path, events: Iterable[LifecycleEventV1], service_id: str | None, epoch: int | None
) -> HitchError | None:
    """The engine failure a run met (from its rows, else from its service epoch's events), or None."""
    for row in _failed_rows(rows_file):
        code = str(row["error_code"])
        return HitchError(
            code,
            f"a request of this run met a failed engine ({code}): an infrastructure failure, not the harness's result",
            {"source": "attempt_rows", "request_id": row.get("request_id"), "epoch": row.get("epoch")},
        )
    for event in events:
        if event.event != "inference.failed" or event.service_id != service_id or event.epoch != epoch:
            continue
        failed = event.details.get("code")
        if failed in ENGINE_FAILURE_CODES:
            return HitchError(
                str(failed),
                f"the run's service failed while the run held it ({failed}): an infrastructure failure, not the harness's result",
                {"source": "service", "service_id": service_id, "epoch": epoch},
            )
    return None
