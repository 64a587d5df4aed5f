"""CertificationResultV1: the predicate of a signed catalog entry (DESIGN §6), and the evidence index.

The predicate is this record and nothing else: the certify plugin builds it, signing serialises it
(``to_json_dict``), verification parses it back (a predicate that does not parse does not verify), reports
read it, and ``docs/schemas/CertificationResultV1.schema.json`` is generated from it. Its ``schema_version``
and the statement's ``predicateType`` (``.../certification/v<schema_version>``) move together whenever the shape
changes; an entry signed under an earlier version stays verifiable and readable.

Schema 3 types the headline figure: ``metrics.gateway_added_latency_ms`` is the *decided* overhead
(:class:`GatewayAddedLatencyV1`: per kind the time in the gateway and the paired shift, each with its 95 %
interval, and the §15.4 verdict), and the black-box percentile difference (gateway - direct, which on a CPU
engine is mostly the engine's own variance) is ``metrics.gateway_latency_difference_ms``, named as such, with
its intervals. Schema 2 entries hold that difference itself as ``gateway_added_latency_ms`` {p50,p95,p99}
(:class:`LegacyAddedLatencyV1`); readers say so instead of presenting it as what the gateway adds. Every
other metric stays a free name -> value pair.

Schema 4 adds the check status ``not_applicable``: the check ran and measured that its subject cannot do what
it measures (the model made no tool round trip, no request reached the engine); ``details.not_applicable``
holds the measured reason. It is never ``passed`` and never counts toward a level. Schema 4 also writes the
margins the entry is to be reproduced by (``margins``: per kind of figure, :mod:`harness.contracts.margins`), so
a later tool decides a reproduction of it by the rule it was published with. An entry of schema 2 or
3 that recorded such a check as ``passed`` with ``details.not_applicable`` reads as ``not_applicable``
(:func:`check_status`), so readers never show it as a pass.

Evidence (DESIGN §6, CONVENTIONS 12): ``evidence`` maps ``<check id>/<file name>`` to the sha256 of the bytes
the check recorded; the bytes themselves are kept content-addressed beside the entry
(``evidence/sha256-<hex>``) with an :class:`EvidenceIndexV1` (``evidence/index.json``), so whoever verifies
the entry can open every file it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
    model_validator,
)

from harness.contracts.base import Record, Sha256
from harness.contracts.margins import FigureKind, MarginV1

__all__ = [
    "CHECK_ID_PATTERN",
    "PREDICATE_SCHEMA_VERSION",
    "CertificationCheckV1",
    "CertificationLevel",
    "CertificationMetricsV1",
    "CertificationModelV1",
    "CertificationResultV1",
    "CheckStatus",
    "EvidenceFileV1",
    "EvidenceIndexV1",
    "GatewayAddedLatencyV1",
    "GatewayOverheadV1",
    "IntervalV1",
    "LatencyDifferenceV1",
    "LegacyAddedLatencyV1",
    "PairedShiftV1",
    "ReproducesV1",
    "check_status",
]

PREDICATE_SCHEMA_VERSION: Literal["4"] = "4"

CertificationLevel = Literal["certified", "provisional", "contract", "failed"]
CHECK_ID_PATTERN = r"^(hardware|protocol|correctness|faults|security|lifecycle|perf|agents)\.[a-z0-9_.]+$"
_EVIDENCE_KEY = r"^(hardware|protocol|correctness|faults|security|lifecycle|perf|agents)\.[a-z0-9_.]+/[A-Za-z0-9][A-Za-z0-9._-]*$"
EvidenceName = Annotated[str, StringConstraints(pattern=_EVIDENCE_KEY)]


CheckStatus = Literal["passed", "failed", "skipped", "not_run", "not_applicable"]


def check_status(check: Mapping[str, Any]) -> str:
    """A check row's status as every reader must take it: an entry before schema 4 recorded a check that found
    its subject unable as ``passed`` with ``details.not_applicable``; that reads ``not_applicable``."""
    status = str(check.get("status", "not_run"))
    details = check.get("details")
    if status == "passed" and isinstance(details, Mapping) and details.get("not_applicable"):
        return "not_applicable"
    return status


class CertificationCheckV1(Record):
    id: str = Field(pattern=CHECK_ID_PATTERN)
    status: CheckStatus = Field(
        description="not_applicable (schema 4): the check ran and measured that its subject cannot do what it "
        "measures; details.not_applicable says why. Never a pass."
    )
    required: bool
    duration_s: float = Field(ge=0)
    summary: str | None = Field(
        default=None, description="the outcome in one sentence, from the check's declaration and its details"
    )
    details: dict[str, Any] = Field(default_factory=dict)


Percentile = Literal["p50", "p95", "p99"]
BoundedPercentile = Literal["p50", "p95"]
OverheadKind = Literal["unary", "stream"]


class IntervalV1(Record):
    """A figure in ms with its bootstrap 95 % interval (``harness.stats.added_intervals``)."""

    estimate: float | None
    low: float | None
    high: float | None
    n: int = Field(ge=0, description="samples per arm (for a paired figure: pairs)")
    reliable: bool = Field(description="enough samples for this percentile (a p99 needs 100)")


class PairedShiftV1(IntervalV1):
    """The median of per-pair differences (each gateway request minus the direct request sent beside it)."""

    target_ms: float = Field(ge=0, description="max(2 ms, 1 % of direct p50)")
    verdict: Literal["met", "missed", "undecided"] = Field(
        description="met: the interval's upper end within the target; missed: its lower end over it"
    )


class GatewayOverheadV1(Record):
    """What the gateway adds to one kind of request at concurrency 1, as the measurement decided it."""

    residence_ms: dict[Percentile, IntervalV1] = Field(
        description="time in the gateway per request: the client's time minus the engine's share (its evidence)"
    )
    paired_shift_ms: PairedShiftV1
    bound_ms: dict[BoundedPercentile, float] = Field(description="the §15.4 bound: max(20 ms, 5 % of direct)")
    verdict: Literal["within", "over"] = Field(description="§15.4, decided on the intervals")
    over: list[str] = Field(default_factory=list, description="what is over the bound, in words (empty: within)")


class GatewayAddedLatencyV1(Record):
    """The headline overhead figure of an entry (schema 3): decided, never a bare difference of percentiles."""

    verdict: Literal["within", "over"] = Field(description="over when either kind is over")
    unary: GatewayOverheadV1
    stream: GatewayOverheadV1


class LatencyDifferenceV1(Record):
    """The black-box difference of E2E percentiles (gateway - direct, samples pooled over rounds). Its interval
    holds the engine's own variance: one that holds 0 is noise, and a negative figure is never a speed-up."""

    unary: dict[Percentile, IntervalV1]
    stream: dict[Percentile, IntervalV1]


class LegacyAddedLatencyV1(Record):
    """Schema 2's ``gateway_added_latency_ms``: the black-box difference (gateway - direct, median over rounds),
    no interval. Read, never written."""

    p50: float
    p95: float
    p99: float


class CertificationMetricsV1(BaseModel):
    """The entry's figures. The overhead headline is typed; every other metric is a name -> value pair that
    the check recording it defines (``certify_record.metric``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    gateway_added_latency_ms: GatewayAddedLatencyV1 | LegacyAddedLatencyV1 | None = Field(
        default=None, description="schema 3: the decided figure; schema 2: the black-box difference"
    )
    gateway_latency_difference_ms: LatencyDifferenceV1 | None = Field(
        default=None, description="the black-box percentile difference with its intervals (schema 3)"
    )


class CertificationModelV1(Record):
    """What the certified model is, in words a reader of the support matrix recognises (not only its digest)."""

    name: str | None = None
    architecture: str | None = None
    parameters: int | None = Field(default=None, ge=0)
    license: str | None = None
    source: str | None = None


class ReproducesV1(Record):
    """The signed entry a certification reproduced (``hitch catalog reproduce``): the same lock, run again."""

    entry_sha256: Sha256 = Field(description="sha256 of the reproduced entry's signed payload (its DSSE statement bytes)")
    inference_id: Sha256 = Field(description="the lock both ran")


class CertificationResultV1(Record):
    schema_version: Literal["2", "3", "4"] = PREDICATE_SCHEMA_VERSION
    level: CertificationLevel
    reasons: list[str]
    to_certify: list[str] = Field(
        default_factory=list, description="what would make a real-engine entry certified on this machine, as actions"
    )
    suite_version: str
    project_commit: str
    device: Literal["cpu", "cuda"]
    engine: Literal["sglang", "fake"]
    launcher: Literal["process", "oci"] | None = None
    runtime_id: Sha256 | None = Field(description="null only when the session failed before it chose a runtime")
    runtime_name: str | None = None
    runtime_pinned_by: Literal["catalog", "operator"] | None = Field(
        default=None, description="who pinned the runtime's digest: the committed catalog, or an operator overlay"
    )
    model_id: Sha256 | None = Field(description="null only when the session failed before it imported the model")
    model: CertificationModelV1 | None = None
    inference_id: Sha256 | None = Field(description="null only when the session failed before it sealed a lock")
    profile: str
    hardware: dict[str, Any]
    checks: list[CertificationCheckV1]
    metrics: CertificationMetricsV1
    evidence: dict[EvidenceName, Sha256] = Field(description="<check id>/<file name> -> sha256 of the kept bytes")
    finished_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
    reproduces: ReproducesV1 | None = Field(default=None, description="set when this certification reproduced an entry")
    margins: dict[FigureKind, MarginV1] | None = Field(
        default=None,
        description="schema 4: per kind of figure, the margin a reproduction of this entry is decided by "
        "(same: the difference's 90 % interval within max(absolute, relative x this entry's estimate))",
    )

    @model_serializer(mode="wrap")
    def _omit_absent_margins(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        # An entry before schema 4 has no margins: leaving the null out gives back the document it signed.
        data: dict[str, Any] = handler(self)
        if data.get("margins") is None:
            data.pop("margins", None)
        return data

    @model_validator(mode="after")
    def _headline_matches_the_version(self) -> CertificationResultV1:
        headline = self.metrics.gateway_added_latency_ms
        legacy = isinstance(headline, LegacyAddedLatencyV1)
        if self.schema_version == "2" and (self.metrics.gateway_latency_difference_ms is not None or (headline and not legacy)):
            raise ValueError("schema 2 predicates hold the black-box difference as gateway_added_latency_ms only")
        if self.schema_version != "2" and legacy:
            raise ValueError(
                "gateway_added_latency_ms is the decided figure since schema 3; the black-box difference is "
                "gateway_latency_difference_ms"
            )
        if self.schema_version in ("2", "3") and any(c.status == "not_applicable" for c in self.checks):
            raise ValueError("the check status not_applicable exists since schema 4")
        if self.schema_version in ("2", "3") and self.margins is not None:
            raise ValueError("margins exist since schema 4")
        return self


class EvidenceFileV1(Record):
    name: EvidenceName = Field(description="<check id>/<file name>, as in the predicate")
    check: str = Field(pattern=CHECK_ID_PATTERN)
    digest: Sha256
    size: int = Field(ge=0)


class EvidenceIndexV1(Record):
    """``evidence/index.json``: every evidence file of one certification run (blobs: ``sha256-<hex>``)."""

    schema_version: Literal["1"] = "1"
    files: list[EvidenceFileV1]
