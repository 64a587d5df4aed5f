"""CertificationTimelineV1: what ran when in a certification session, on which process and engine.

``results.json`` carries it under ``timeline`` beside the predicate (never inside it: the signed entry claims
exactly what it claimed before). Every span has wall-clock start and end (epoch seconds, one clock for every
process of the machine), the process it ran in (``worker``: the pytest-xdist worker id, ``main`` for a
session without workers, ``controller`` for what the controlling process does after the workers finished)
and its pid.

Span kinds:

- ``check``: a check's own run (pytest's call phase; for a session-end check, its function), ``check`` its id;
- ``fixture``: a fixture's setup (``phase="setup"``) or teardown (``phase="teardown"``), ``name`` the fixture,
  ``scope`` its pytest scope, ``check`` the check whose setup/teardown paid for it;
- ``step``: a named step inside one of those (the session engine's start, the reference computation, a private
  daemon or engine start), recorded by the code that does it;
- ``wait``: time a check's setup spent waiting for another process (its turn on the session engine while another
  worker's exclusive check runs), ``name`` what it waited for.

``engine`` says which engine a span used: ``session`` (the session's shared engine), ``private`` (a private
daemon or engine a fault/lifecycle check started), ``none``; unknown for fixtures that only wait or prepare.
``cpu`` is the machine's CPU time over the session (``/proc/stat`` at its start and end), when readable.

``quiet`` lists the session's quiet phases (:mod:`certify.quiet`): a timing taken with the machine to itself,
the machine's busy cores read before and after it against the limit, and the verdict (``quiet``; ``refused``:
the figure was not recorded; ``unguarded``: ``--quiet-load off``). ``cpu_outside_quiet`` is the machine's
utilisation over the rest of the session (the part where checks overlap).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.contracts.base import Record

__all__ = [
    "TIMELINE_SCHEMA_VERSION",
    "CertificationTimelineV1",
    "CpuUsageV1",
    "QuietPhaseV1",
    "SpanEngine",
    "TimelineSpanV1",
]

TIMELINE_SCHEMA_VERSION: Literal["1"] = "1"

DURATION_SLACK_S = 0.001  # durations are written rounded to the microsecond

SpanEngine = Literal["session", "private", "none"]


class TimelineSpanV1(Record):
    kind: Literal["check", "fixture", "step", "wait"]
    name: str = Field(min_length=1, description="the check id, the fixture's name or the step's name")
    phase: Literal["setup", "call", "teardown", "session_end"] = Field(description="the pytest phase it ran in")
    check: str | None = Field(default=None, description="the check whose phase it ran in")
    scope: str | None = Field(default=None, description="a fixture's pytest scope")
    worker: str = Field(min_length=1, description="xdist worker id, main (no workers) or controller")
    pid: int = Field(ge=0)
    engine: SpanEngine | None = None
    start: float = Field(ge=0, description="epoch seconds")
    end: float = Field(ge=0, description="epoch seconds")
    duration_s: float = Field(ge=0, description="end - start")

    @model_validator(mode="after")
    def _ordered(self) -> TimelineSpanV1:
        if self.end < self.start:
            raise ValueError(f"span {self.name!r} ends before it starts")
        if abs(self.duration_s - (self.end - self.start)) > DURATION_SLACK_S:
            raise ValueError(f"span {self.name!r}: duration_s is not end - start")
        return self


class CpuUsageV1(Record):
    """The machine's CPU over the session: (user + nice + system) time / (wall time x cores)."""

    cores: int = Field(ge=1)
    user_s: float = Field(ge=0)
    system_s: float = Field(ge=0)
    utilisation: float = Field(ge=0, description="0..1 of the whole machine")


class QuietPhaseV1(Record):
    """One quiet phase: a timing taken with the machine to itself (see the module doc)."""

    name: str = Field(min_length=1, description="the check or fixture whose timing it took")
    check: str | None = Field(default=None, description="the check whose setup or run took it")
    worker: str = Field(min_length=1)
    start: float = Field(ge=0, description="epoch seconds: the machine's turn taken")
    end: float = Field(ge=0, description="epoch seconds: the after-reading done")
    limit_cores: float | None = Field(default=None, description="most busy cores a quiet machine shows; None: off")
    limit_setting: str = Field(description="--quiet-load: auto, off or a number")
    before_cores: float | None = Field(default=None, description="busy cores read before the timing")
    after_cores: float | None = Field(default=None, description="busy cores read after it")
    waited_s: float = Field(ge=0, description="time spent waiting for the machine to settle")
    cpu_s: float | None = Field(default=None, ge=0, description="the machine's CPU time over the phase")
    verdict: Literal["quiet", "refused", "unguarded"]
    reason: str = ""


class CertificationTimelineV1(Record):
    schema_version: Literal["1"] = TIMELINE_SCHEMA_VERSION
    started_at: float = Field(ge=0, description="epoch seconds: the controlling process's session start")
    ended_at: float = Field(ge=0, description="epoch seconds: every check and session-end check done")
    wall_s: float = Field(ge=0, description="ended_at - started_at")
    spans: list[TimelineSpanV1]
    cpu: CpuUsageV1 | None = None
    quiet: list[QuietPhaseV1] = Field(default_factory=list)
    cpu_outside_quiet: float | None = Field(default=None, ge=0, description="0..1: utilisation outside the quiet phases")

    @model_validator(mode="after")
    def _ordered(self) -> CertificationTimelineV1:
        if self.ended_at < self.started_at:
            raise ValueError("the timeline ends before it starts")
        if abs(self.wall_s - (self.ended_at - self.started_at)) > DURATION_SLACK_S:
            raise ValueError("wall_s is not ended_at - started_at")
        return self
