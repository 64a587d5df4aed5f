"""InferenceExecutionEvidenceV1: what one run's inference really was (spec §6.1, §12.1).

Written by the daemon for every terminal status of a run that reached a service. The request count and the
token totals are derived from the gateway's attempt rows (one ``RequestEvidenceV1`` per physical attempt,
refusals included), copied beside the record with their digest; ``complete`` is derived from the checks
and the record refuses to say otherwise.

:class:`ModelIdentityV1` (spec §6.3) says which model answered: the reference the request named
(``requested_id``, e.g. ``local/ALIAS``), the verified ``model_id`` (``effective_id``), the digest of the
sampling policy and the inference id. ``identity_resolved`` is set by the daemon only, after the manager's
service passed readiness (its ``/server_info`` matched the lock); the engine's wire alias (``response.model``,
``served_model_name``) is recorded as ``wire_model`` and never stands for the identity.

``readiness`` and ``engine_memory`` (:mod:`harness.contracts.run_readiness`, spec §12.1): how the serving epoch
became ready (cold start and warm-up when this run started it, the tool-call probe when the run needed it) and the
engine's RSS while the run was live.

Schema versions: files written under schema 1 (before the attempt ledger) stay readable as
:class:`ExecutionEvidenceSchema1`; :func:`parse_execution_evidence` reads either version.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, model_validator

from harness.contracts.base import Record, Sha256
from harness.contracts.binding import ModelEndpointBindingV1
from harness.contracts.run_readiness import EngineMemorySeriesV1, RunReadinessV1

__all__ = [
    "AttemptLedgerV1",
    "EngineRequestsV1",
    "EvidenceCheckV1",
    "ExecutionEvidenceSchema1",
    "HardwareFingerprintV1",
    "InferenceExecutionEvidenceV1",
    "ModelIdentityV1",
    "ServingMetricsV1",
    "parse_execution_evidence",
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
    unavailable: dict[Literal["input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens"], int] = Field(
        default_factory=dict,
        description="count -> rows of attempts that reached the engine (not /v1/models, not rejected) without it (the "
        "engine's usage never arrived, or it does not report that count): the total leaves them out and says so here; "
        "absent when every such row carried it (and in files written before it existed)",
    )
    output_tokens_per_s: float | None = Field(
        default=None,
        ge=0,
        description="the run's output tokens over the end-to-end seconds of the attempts that reported both (each "
        "attempt's own time: concurrent ones are not merged); null when none did (and in older files)",
    )


class ServingMetricsV1(Record):
    """The engine's ``/metrics`` text at run start and at run end; the run is joined to them by time."""

    start_at: float | None
    end_at: float | None
    start_file: str | None
    end_file: str | None
    errors: list[str] = Field(default_factory=list)


class EngineRequestsV1(Record):
    """The engine's own per-request figures, joined to the attempt rows by request id (seed 004), not by time.

    ``engine-requests.jsonl`` holds one row per attempt that reached the engine: the gateway's request id, the
    engine's request id, and what the engine reported for that request (its usage details: input, cached,
    output and reasoning tokens as SGLang counted them) beside the engine's share of the request as the gateway
    timed it. Attempts the engine never answered (refused by the gateway, a connect failure) have no engine
    request id and are counted in ``unmatched``.
    """

    file: str = Field(description="engine-requests.jsonl beside this record")
    digest: Sha256
    joined: int = Field(ge=0, description="attempt rows joined to an engine request id")
    unmatched: int = Field(ge=0, description="attempt rows without an engine request id")


class ModelIdentityV1(Record):
    """Spec §6.3: which model answered, as the daemon verified it (never as the engine or a caller said)."""

    requested_id: str = Field(description="the model reference the run named (local/ALIAS, local/sha256:..., or the lock's)")
    effective_id: Sha256 = Field(description="the verified model_id of the lock the service loaded")
    provider: Literal["local"] = "local"
    parameters_sha256: Sha256 = Field(description="sha256 of the lock's generation (sampling) policy, canonical JSON")
    inference_id: Sha256 | None = None
    identity_resolved: bool = Field(description="set by the daemon after the service passed readiness against the lock")
    wire_model: str = Field(description="the alias on the wire (served_model_name); never an identity")


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
    model_identity: ModelIdentityV1 | None = Field(default=None, description="null only in files written before it existed")
    engine_requests: EngineRequestsV1 | None = Field(default=None, description="null only in files written before it existed")
    readiness: RunReadinessV1 | None = Field(
        default=None,
        description="the serving epoch's readiness, cold start and warm-up, and its tool-call probe; null when the "
        "daemon died with the run live (and in files written before it existed)",
    )
    engine_memory: EngineMemorySeriesV1 | None = Field(
        default=None,
        description="the engine's RSS sampled while the run was live; null when the daemon died with the run live "
        "(and in files written before it existed)",
    )

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
        identity = self.model_identity
        if identity is not None and (identity.effective_id != self.model_id or identity.inference_id != self.inference_id):
            raise ValueError("the model identity is the lock's: effective_id = model_id, inference_id = inference_id")
        ready = self.readiness
        if ready is not None and (ready.service_id, ready.epoch) != (self.service_id, self.epoch):
            raise ValueError("the readiness is that of the run's service epoch")
        if ready is not None and ready.started_by_run == self.reused_service:
            raise ValueError("a run reused its service exactly when it did not start it")
        return self


class ExecutionEvidenceSchema1(Record):
    """Schema 1 of the execution evidence (before the attempt ledger, the checks and the binding): read, never
    written. Its ``hardware`` was the :class:`HardwareFingerprintV1` shape."""

    schema_version: Literal["1"]
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


ExecutionEvidence = Annotated[ExecutionEvidenceSchema1 | InferenceExecutionEvidenceV1, Field(discriminator="schema_version")]
_EVIDENCE = TypeAdapter(ExecutionEvidence)


def parse_execution_evidence(data: Any) -> ExecutionEvidenceSchema1 | InferenceExecutionEvidenceV1:
    """An ``execution.json`` of any schema version (a JSON string or the parsed object)."""
    if isinstance(data, str | bytes):
        return _EVIDENCE.validate_json(data)
    return _EVIDENCE.validate_python(data)
