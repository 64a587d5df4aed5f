"""CertificationResultV1: the predicate of a signed catalog entry (DESIGN §6)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256

__all__ = ["CertificationCheckV1", "CertificationLevel", "CertificationResultV1"]

CertificationLevel = Literal["certified", "provisional", "contract", "failed"]


class CertificationCheckV1(Record):
    id: str = Field(pattern=r"^(hardware|protocol|faults|security|lifecycle|perf|agents)\.[a-z0-9_.]+$")
    status: Literal["passed", "failed", "skipped", "not_run"]
    required: bool
    duration_s: float = Field(ge=0)
    details: dict[str, Any] = Field(default_factory=dict)


class CertificationResultV1(Record):
    schema_version: Literal["1"] = "1"
    level: CertificationLevel
    reasons: list[str]
    suite_version: str
    project_commit: str
    device: Literal["cpu", "cuda"]
    engine: Literal["sglang", "fake"]
    runtime_id: Sha256
    model_id: Sha256
    inference_id: Sha256
    profile: str
    hardware: dict[str, Any]
    checks: list[CertificationCheckV1]
    metrics: dict[str, Any]
    evidence: dict[str, Sha256]
