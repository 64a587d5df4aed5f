"""Lifecycle events ``inference.*`` (spec §12.1) and per-request evidence rows."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256

__all__ = ["LifecycleEventName", "LifecycleEventV1", "RequestEvidenceV1"]

LifecycleEventName = Literal[
    "inference.preparing",
    "inference.queued",
    "inference.starting",
    "inference.ready",
    "inference.acquired",
    "inference.released",
    "inference.draining",
    "inference.stopped",
    "inference.failed",
]


class LifecycleEventV1(Record):
    schema_version: Literal["1"] = "1"
    event: LifecycleEventName
    service_id: str
    inference_id: Sha256
    epoch: int = Field(ge=0)
    owner_id: str
    timestamp: float
    run_id: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class RequestEvidenceV1(Record):
    """One row per physical request through the gateway (never one per logical retry)."""

    schema_version: Literal["1"] = "1"
    request_id: str
    engine_rid: str | None
    run_id: str
    inference_id: Sha256
    epoch: int = Field(ge=0)
    route: Literal["/v1/responses", "/v1/chat/completions", "/v1/models"]
    stream: bool
    queue_ms: float | None
    ttft_ms: float | None = Field(description="first text delta; null when none arrived")
    e2e_ms: float | None
    engine_ms: float | None = Field(
        default=None,
        description="the engine's share of e2e_ms as the gateway saw it: from the request leaving for the engine to "
        "its answer read to the end; e2e_ms - engine_ms is the time spent in the gateway (null when no whole answer)",
    )
    engine_ttft_ms: float | None = Field(
        default=None, description="from the request leaving for the engine to the first text delta read from it"
    )
    input_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None = Field(description="reasoning tokens are a subset, never added")
    reasoning_tokens: int | None
    max_output_tokens: int | None
    status: Literal["completed", "incomplete", "failed", "cancelled", "rejected"]
    http_status: int
    error_code: str | None
    benchmark_controls: dict[str, bool | int] | None = Field(
        default=None, description="benchmark sampling controls the caller set to other than SGLang's default"
    )
    tool_calls: int | None = Field(
        default=None,
        description="structured tool calls in the answer (chat message.tool_calls; Responses function_call items); "
        "null when no answer was read",
    )
    timeout_ms: float | None = Field(
        default=None,
        description="the request's timeout: min(the run deadline's time left, the lock's request timeout); null when "
        "the request never reached admission",
    )
    deadline_left_ms: float | None = Field(
        default=None, description="what was left of the run's deadline when the request arrived; null: no deadline"
    )
    admitted_seq: int | None = Field(
        default=None,
        ge=1,
        description="the n-th admission of the service epoch's gateway queue (the order requests were served, across "
        "runs); null when never admitted",
    )
    abort_confirm_ms: float | None = Field(
        default=None,
        description="a request the gateway abandoned after forwarding it (client gone, timeout): from the engine "
        "connection's close until the engine showed the slot free",
    )
    abort_outcome: Literal["free", "unconfirmed", "engine_gone"] | None = Field(
        default=None,
        description="an abandoned request: the engine showed its slot free, never did within the lock's "
        "abort_confirm_timeout_ms (the service epoch then entered fault handling), or was gone; null otherwise",
    )
    completed_fields: list[str] | None = Field(
        default=None,
        description="a Responses answer: the fields the gateway added to it, or whose schema-forbidden null it "
        "replaced, to conform to the Open Responses schema (gateway.responses_completion; the engine's own bytes "
        "are what capture keeps); [] when the engine's answer needed nothing; null on other routes or when no "
        "answer was relayed",
    )
    request_sha256: Sha256 | None = Field(
        default=None, description="capture metadata or full: sha256 of the request body sent to the engine"
    )
    response_sha256: Sha256 | None = Field(
        default=None, description="capture metadata or full: sha256 of the engine's answer as read (the bytes capture keeps)"
    )
    response_bytes: int | None = Field(default=None, ge=0, description="capture metadata or full: the answer's size")
    capture_truncated: bool | None = Field(
        default=None, description="capture full: the bytes kept stop at the run's per-request capture bound"
    )
