"""InferenceExecutionEvidenceV1: what one run's inference really was (spec §6.1, §12.1)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256

__all__ = ["HardwareFingerprintV1", "InferenceExecutionEvidenceV1"]


class HardwareFingerprintV1(Record):
    device: Literal["cpu", "cuda"]
    cpu_model: str | None = None
    cpu_flags: list[str] = Field(default_factory=list, description="the ISA flags that matter (amx*, avx512*, avx2)")
    numa_nodes: int | None = None
    gpu_name: str | None = None
    gpu_uuid: str | None = None
    driver_version: str | None = None
    compute_capability: str | None = None


class InferenceExecutionEvidenceV1(Record):
    schema_version: Literal["1"] = "1"
    run_id: str
    inference_id: Sha256
    lock_digest: Sha256
    service_id: str
    epoch: int = Field(ge=0)
    hardware: HardwareFingerprintV1
    observed: dict[str, Any] = Field(description="allow-listed /server_info facts (never keys)")
    reused_service: bool
    cache_condition: Literal["cold", "warm"]
    requests: int = Field(ge=0)
    complete: bool
