"""CertificationResultV1: the predicate of a signed catalog entry (DESIGN §6), and the evidence index.

The predicate is this record and nothing else: the certify plugin builds it, signing serialises it
(``to_json_dict``), verification parses it back (a predicate that does not parse does not verify), reports
read it, and ``docs/schemas/CertificationResultV1.schema.json`` is generated from it. Its ``schema_version``
and the statement's ``predicateType`` (``.../certification/v2``) move together whenever the shape changes.

Evidence (DESIGN §6, CONVENTIONS 12): ``evidence`` maps ``<check id>/<file name>`` to the sha256 of the bytes
the check recorded; the bytes themselves are kept content-addressed beside the entry
(``evidence/sha256-<hex>``) with an :class:`EvidenceIndexV1` (``evidence/index.json``), so whoever verifies
the entry can open every file it names.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from harness.contracts.base import Record, Sha256

__all__ = [
    "CHECK_ID_PATTERN",
    "CertificationCheckV1",
    "CertificationLevel",
    "CertificationModelV1",
    "CertificationResultV1",
    "EvidenceFileV1",
    "EvidenceIndexV1",
    "ReproducesV1",
]

CertificationLevel = Literal["certified", "provisional", "contract", "failed"]
CHECK_ID_PATTERN = r"^(hardware|protocol|correctness|faults|security|lifecycle|perf|agents)\.[a-z0-9_.]+$"
_EVIDENCE_KEY = r"^(hardware|protocol|correctness|faults|security|lifecycle|perf|agents)\.[a-z0-9_.]+/[A-Za-z0-9][A-Za-z0-9._-]*$"
EvidenceName = Annotated[str, StringConstraints(pattern=_EVIDENCE_KEY)]


class CertificationCheckV1(Record):
    id: str = Field(pattern=CHECK_ID_PATTERN)
    status: Literal["passed", "failed", "skipped", "not_run"]
    required: bool
    duration_s: float = Field(ge=0)
    details: dict[str, Any] = Field(default_factory=dict)


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
    schema_version: Literal["2"] = "2"
    level: CertificationLevel
    reasons: list[str]
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
    metrics: dict[str, Any]
    evidence: dict[EvidenceName, Sha256] = Field(description="<check id>/<file name> -> sha256 of the kept bytes")
    finished_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
    reproduces: ReproducesV1 | None = Field(default=None, description="set when this certification reproduced an entry")


class EvidenceFileV1(Record):
    name: EvidenceName = Field(description="<check id>/<file name>, as in the predicate")
    check: str = Field(pattern=CHECK_ID_PATTERN)
    digest: Sha256
    size: int = Field(ge=0)


class EvidenceIndexV1(Record):
    """``evidence/index.json``: every evidence file of one certification run (blobs: ``sha256-<hex>``)."""

    schema_version: Literal["1"] = "1"
    files: list[EvidenceFileV1]
