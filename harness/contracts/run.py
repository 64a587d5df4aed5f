"""RunRecordV1: the durable state of one run, ``runs/<run-id>/run.json``.

A run moves ``admitted → preparing → running`` and ends in exactly one terminal status: ``completed``,
``failed``, ``cancelled`` or ``interrupted`` (its daemon died while it was live; found at the next daemon
start). A terminal status is final. Every terminal status but ``completed`` carries an error code from the
one error table, and ``completed`` carries none: a transport close or a partial answer never becomes
``completed`` by default.

``identity`` (:class:`RunIdentityV1`) is what makes a run id idempotent: the digest of the
submission's identity-relevant fields, one digest per field beside it (values are never stored, only their
hashes). The same run id with the same digest answers the same record; with another digest it is
``run_conflict`` (:mod:`harness.app.run_identity`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from harness.contracts.base import Record, Sha256
from harness.errors import ERROR_TABLE

__all__ = [
    "LIVE_STATUSES",
    "TERMINAL_STATUSES",
    "RunErrorV1",
    "RunIdentityV1",
    "RunRecordV1",
    "RunStatus",
    "RunStopV1",
    "RunTransitionV1",
]

RunStatus = Literal["admitted", "preparing", "running", "completed", "failed", "cancelled", "interrupted"]
LIVE_STATUSES: frozenset[str] = frozenset({"admitted", "preparing", "running"})
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "interrupted"})


class RunErrorV1(Record):
    code: str = Field(description="a code of harness.errors.ERROR_TABLE")
    message: str

    @model_validator(mode="after")
    def _known_code(self) -> RunErrorV1:
        if self.code not in ERROR_TABLE:
            raise ValueError(f"error code {self.code!r} is not in the error table")
        return self


class RunStopV1(Record):
    """Who ended a run that its owner did not end: an operator's stop of its service or of the daemon."""

    reason: Literal["operator_stop"]
    by: str = Field(description="the stopping command and its process (pid, uid), as the daemon saw its caller")
    at: float
    what: Literal["service", "daemon"]


class RunTransitionV1(Record):
    status: RunStatus
    at: float


class RunIdentityV1(Record):
    """The canonical digest of a submission: what makes the same run id the same request."""

    digest: Sha256 = Field(description="sha256 of the canonical JSON of ``fields``")
    fields: dict[str, Sha256] = Field(
        description="each identity-relevant field (harness, model_id, lock or its inputs, capture, the "
        "harness's own submission: prompt digest, budget, agent args, ...) -> sha256 of its canonical JSON value"
    )


class RunRecordV1(Record):
    schema_version: Literal["1"] = "1"
    run_id: str
    status: RunStatus
    harness: str | None = Field(description="model-call | codex; null for `hitch local serve`")
    request: dict[str, Any] = Field(description="what was asked (model, device, profile, runtime, engine, ...); no secret")
    identity: RunIdentityV1 | None = Field(
        default=None, description="the submission's digest; null only in records written before it existed"
    )
    capture: Literal["off", "metadata", "full"]
    inference_id: Sha256 | None = None
    service_id: str | None = None
    epoch: int | None = Field(default=None, ge=0)
    lease_id: str | None = None
    binding_id: str | None = None
    daemon_pid: int = Field(description="the daemon that admitted the run")
    admitted_at: float
    updated_at: float
    finished_at: float | None = None
    history: list[RunTransitionV1]
    error: RunErrorV1 | None = None
    evidence_complete: bool | None = Field(default=None, description="the run evidence's own verdict, once written")
    ref_digest: Sha256 | None = Field(
        default=None, description="sha256 of runs/<id>/inference.ref.json, the sealed evidence set (once written)"
    )
    rerun_of: str | None = Field(default=None, description="the run this one reran (hitch run rerun), same lock")
    stopped_by: RunStopV1 | None = Field(default=None, description="set when an operator's stop ended the run")

    @model_validator(mode="after")
    def _terminal_error(self) -> RunRecordV1:
        terminal = self.status in TERMINAL_STATUSES
        if self.status == "completed" and self.error is not None:
            raise ValueError("a completed run carries no error")
        if terminal and self.status != "completed" and self.error is None:
            raise ValueError(f"a {self.status} run carries an error code")
        if terminal != (self.finished_at is not None):
            raise ValueError("finished_at is set exactly when the status is terminal")
        if not self.history or self.history[-1].status != self.status:
            raise ValueError("the history ends with the current status")
        return self

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES
