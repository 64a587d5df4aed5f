"""HarnessCompatibilityProfileV1: what one harness artifact was certified to do with one lock surface (spec §10.3).

A profile is keyed by (harness artifact + version, runtime_id, model/template profile, protocol); its id is
the digest of that key. It carries the field-by-field table of what the gateway does with the harness's
request (forward, map, strip or reject: nothing is dropped silently) and the certification results. A
harness without a profile whose results all passed is refused with ``inference_harness_unsupported``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from harness.contracts.base import Record, Sha256

__all__ = ["FieldRuleV1", "HarnessCompatibilityProfileV1", "HarnessKeyV1", "ProfileResultV1"]


class HarnessKeyV1(Record):
    harness: Literal["model-call", "codex", "harbor-agent"]
    artifact: str = Field(
        description="exact artifact, e.g. npm:@openai/codex@0.171.0, harbor@0.25.0:terminus-2, or a Harbor agent "
        "module: harbor@0.25.0:pkg.module:Class#sha256:<the module file's digest>"
    )
    version: str
    runtime_id: Sha256
    model_profile: Sha256 = Field(description="the checkpoint (weights + tokenizer + chat template) digest: model_id")
    protocol: Literal["responses", "chat-completions"]


class FieldRuleV1(Record):
    field: str = Field(description="request field or item kind, e.g. input[].role=developer")
    harness_sends: str = Field(description="what the harness sends, as measured")
    sends: bool | None = Field(
        default=None,
        description="the exact value the harness always sends, for a field whose value the lock fixes (the gateway "
        "refuses any other: parallel_tool_calls); a lock with another value refuses the harness before a run starts. "
        "Omitted when null.",
    )
    gateway: Literal["forward", "map", "strip", "reject"]
    detail: str = Field(description="what happens to it, through the gateway and in the engine")

    @model_serializer(mode="wrap")
    def _omit_unset_sends(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("sends") is None:
            data.pop("sends", None)
        return data


class ProfileResultV1(Record):
    check_id: str
    engine: Literal["sglang", "fake"]
    device: Literal["cpu", "cuda"]
    outcome: Literal["passed", "failed"]
    recorded_at: float
    details: dict[str, str | int | float | bool | None] = Field(default_factory=dict)


class HarnessCompatibilityProfileV1(Record):
    schema_version: Literal["1"] = "1"
    profile_id: Sha256
    key: HarnessKeyV1
    fields: list[FieldRuleV1]
    results: list[ProfileResultV1]
