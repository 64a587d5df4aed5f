"""The durable run records of one root: ``runs/<run-id>/run.json``.

Owns :class:`RunStore`. Only the daemon writes (it holds ``daemon.lock``, so one writer per root); every
write replaces the whole file atomically, so a reader sees the previous or the next state, never half of
one. :meth:`RunStore.advance` refuses to move a terminal run (a terminal status is final) and to go back;
:meth:`RunStore.sweep_interrupted` runs at daemon start, before anything is served: a run still live on
disk belonged to a daemon that is gone, so it ends ``interrupted`` (never left ``running``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.contracts.run import (
    LIVE_STATUSES,
    RunErrorV1,
    RunIdentityV1,
    RunRecordV1,
    RunStatus,
    RunStopV1,
    RunTransitionV1,
)
from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir

__all__ = ["RunStore"]

_ORDER = {"admitted": 0, "preparing": 1, "running": 2}


class RunStore:
    def __init__(self, root: HitchRoot) -> None:
        self.root = root

    def dir(self, run_id: str) -> Path:
        return self.root.runs / run_id

    def path(self, run_id: str) -> Path:
        return self.dir(run_id) / "run.json"

    def read(self, run_id: str) -> RunRecordV1 | None:
        try:
            text = self.path(run_id).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HitchError("storage_write_failed", f"cannot read run {run_id}", {"error": exc.strerror}) from exc
        try:
            return RunRecordV1.model_validate_json(text)
        except ValidationError as exc:
            raise HitchError("internal_error", f"runs/{run_id}/run.json is not a RunRecordV1", {}) from exc

    def _write(self, record: RunRecordV1) -> RunRecordV1:
        ensure_private_dir(self.dir(record.run_id))
        try:
            atomic_write_json(self.path(record.run_id), record.to_json_dict())
        except OSError as exc:
            raise HitchError("storage_write_failed", f"cannot write run {record.run_id}", {"error": exc.strerror}) from exc
        return record

    def admit(
        self, run_id: str, harness: str | None, request: dict[str, Any], capture: str, identity: RunIdentityV1 | None = None
    ) -> RunRecordV1:
        now = time.time()
        record = RunRecordV1(
            run_id=run_id,
            status="admitted",
            harness=harness,
            request=request,
            identity=identity,
            capture=capture,
            daemon_pid=os.getpid(),
            admitted_at=now,
            updated_at=now,
            history=[RunTransitionV1(status="admitted", at=now)],
        )
        return self._write(record)

    def advance(self, run_id: str, status: RunStatus, **updates: Any) -> RunRecordV1:
        """Move a live run forward (``preparing``, ``running``) recording ``updates`` (ids of its lease)."""
        record = self._require(run_id)
        if record.terminal:
            raise HitchError(
                "run_cancelled" if record.status == "cancelled" else "run_in_progress",
                f"run {run_id} is already {record.status}",
                {"run_id": run_id, "status": record.status},
            )
        if _ORDER[status] < _ORDER[record.status]:
            raise HitchError("internal_error", f"run {run_id} cannot go from {record.status} to {status}", {})
        now = time.time()
        history = [*record.history, RunTransitionV1(status=status, at=now)]
        update = {**updates, "status": status, "updated_at": now, "history": history}
        return self._write(RunRecordV1.model_validate({**record.model_dump(), **update}))

    def finish(
        self, run_id: str, status: RunStatus, error: HitchError | None, stopped_by: RunStopV1 | None = None
    ) -> RunRecordV1:
        """End a run; a run already terminal keeps its first terminal status (returned as it is)."""
        record = self._require(run_id)
        if record.terminal:
            return record
        if status in LIVE_STATUSES:
            raise HitchError("internal_error", f"{status} is not a terminal status", {})
        now = time.time()
        update: dict[str, Any] = {
            "status": status,
            "updated_at": now,
            "finished_at": now,
            "history": [*record.history, RunTransitionV1(status=status, at=now)],
            "error": None if error is None or status == "completed" else RunErrorV1(code=error.code, message=error.message),
            "stopped_by": stopped_by,
        }
        return self._write(RunRecordV1.model_validate({**record.model_dump(), **update}))

    def note(self, run_id: str, **updates: Any) -> RunRecordV1:
        """Record facts that do not change the status (the evidence's verdict)."""
        record = self._require(run_id)
        return self._write(RunRecordV1.model_validate({**record.model_dump(), **updates}))

    def _require(self, run_id: str) -> RunRecordV1:
        record = self.read(run_id)
        if record is None:
            raise HitchError("run_not_found", f"no run {run_id!r} in this root", {"run_id": run_id})
        return record

    def live(self) -> list[RunRecordV1]:
        if not self.root.runs.is_dir():
            return []
        found = []
        for path in sorted(self.root.runs.glob("*/run.json")):
            try:
                record = RunRecordV1.model_validate(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue  # not ours to judge: an unreadable record stays for a person to inspect
            if not record.terminal:
                found.append(record)
        return found

    def sweep_interrupted(self) -> list[RunRecordV1]:
        """At daemon start (``daemon.lock`` held): every live record was left by a daemon that is gone."""
        err = HitchError("run_interrupted", "the daemon ended while this run was live", {})
        return [self.finish(r.run_id, "interrupted", err) for r in self.live()]
