"""InferenceExecutionEvidenceV1: what one run's inference really was (spec §6.1, §12.1).

Written by the daemon for every terminal status of a run that reached a service. The request count and the
token totals are derived from the gateway's attempt rows (one ``RequestEvidenceV1`` per physical attempt,
refusals included), copied beside the record with their digest; ``complete`` is derived from the checks
and the record refuses to say otherwise.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from harness.contracts.base import Record, Sha256
from harness.contracts.binding import ModelEndpointBindingV1

__all__ = [
    "AttemptLedgerV1",
    "EvidenceCheckV1",
    "HardwareFingerprintV1",
    "InferenceExecutionEvidenceV1",
    "ServingMetricsV1",
]


class HardwareFingerprintV1(Record):
    device: Literal["cpu", "cuda"]
    cpu_model: str | None = None
    cpu_flags: list[str] = Field(default_factory=list, description="the ISA flags that matter (amx*, avx512*, avx2)")
    numa_nodes: int | None = None
    gpu_name: str | None = None
    gpu_uuid: str | None = None
    driver_version: str | None = None
    compute_capability: str | None = None


class AttemptLedgerV1(Record):
    """The run's attempt rows as the gateway wrote them; totals are column sums of the engine's numbers.

    ``input_tokens`` already includes ``cached_tokens`` and ``output_tokens`` already includes
    ``reasoning_tokens`` (as the engine reports them): the totals are never added to each other.
    """

    file: str = Field(description="attempts.jsonl beside this record")
    digest: Sha256 = Field(description="sha256 of the rows file as copied")
    rows: int = Field(ge=0)
    begun: int = Field(ge=0, description="exchanges the gateway began for this run (each must end as one row)")
    by_status: dict[str, int]
    input_tokens: int = Field(ge=0)
    cached_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    reasoning_tokens: int = Field(ge=0)


class ServingMetricsV1(Record):
    """The engine's ``/metrics`` text at run start and at run end; the run is joined to them by time."""

    start_at: float | None
    end_at: float | None
    start_file: str | None
    end_file: str | None
    errors: list[str] = Field(default_factory=list)


class EvidenceCheckV1(Record):
    name: Literal["attempts_recorded", "capture_complete", "no_writer_error"]
    ok: bool
    code: Literal["inference_capture_incomplete"] | None = Field(description="set exactly when the check failed")
    detail: str


class InferenceExecutionEvidenceV1(Record):
    schema_version: Literal["2"] = "2"
    run_id: str
    status: Literal["completed", "failed", "cancelled", "interrupted"]
    error_code: str | None
    inference_id: Sha256
    lock_digest: Sha256
    model_id: Sha256
    runtime_id: Sha256
    service_id: str
    epoch: int = Field(ge=0)
    hardware: dict[str, Any] = Field(description="harness.devices.fingerprint.hardware_fingerprint(device)")
    observed: dict[str, Any] = Field(description="the engine's /server_info at run start, keys removed")
    binding: ModelEndpointBindingV1
    reused_service: bool
    cache_condition: Literal["cold", "warm"]
    capture: Literal["off", "metadata", "full"]
    attempts: AttemptLedgerV1
    serving_metrics: ServingMetricsV1
    requests: int = Field(ge=0, description="the number of attempt rows")
    checks: list[EvidenceCheckV1]
    complete: bool
    incomplete_code: Literal["inference_capture_incomplete"] | None

    @model_validator(mode="after")
    def _derived(self) -> InferenceExecutionEvidenceV1:
        if self.requests != self.attempts.rows:
            raise ValueError("requests is the number of attempt rows")
        if self.complete != all(c.ok for c in self.checks) or not self.checks:
            raise ValueError("complete is derived from the checks")
        if any(c.ok == (c.code is not None) for c in self.checks):
            raise ValueError("a check carries a code exactly when it failed")
        if (self.incomplete_code is None) != self.complete:
            raise ValueError("incomplete_code is set exactly when the evidence is incomplete")
        return self
