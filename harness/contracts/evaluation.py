"""EvaluationRecordV1: one ``hitch eval harbor`` run, ``evals/<eval-id>/evaluation.json``.

One record per evaluation, one :class:`TrialOutcomeV1` per trial. Each trial was its own run (its own
binding, token, evidence and budget, ``runs/<run-id>/``): its terminal status and error code are that run's
(RunRecordV1's statuses), its request count and token totals come from the gateway's attempt rows in the run's
execution evidence — never from the agent's own count — and ``service`` names the service entry the trial
was served by. The reward is the verifier's, ``null`` when no verifier ran (a cancelled or failed trial).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256
from harness.contracts.run import RunErrorV1

__all__ = ["EvaluationRecordV1", "TrialOutcomeV1", "TrialServiceV1", "TrialTimingV1", "TrialUsageV1"]


class TrialTimingV1(Record):
    total_s: float | None = None
    environment_setup_s: float | None = None
    agent_setup_s: float | None = None
    agent_execution_s: float | None = None
    verifier_s: float | None = None
    teardown_s: float | None = Field(
        default=None, description="from the end of the last phase (verifier, else agent) to the trial's end: stop and removal"
    )


class TrialUsageV1(Record):
    """From the run's execution evidence (the gateway's rows): what reached the model through the binding."""

    requests: int = Field(ge=0)
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    evidence_complete: bool


class TrialServiceV1(Record):
    service_id: str
    epoch: int = Field(ge=0)
    inference_id: Sha256
    reused_service: bool = Field(description="the service was already up when this trial's run acquired it")


class TrialOutcomeV1(Record):
    trial: str
    task: str
    run_id: str
    binding_id: str | None
    status: Literal["completed", "failed", "cancelled", "interrupted"]
    error: RunErrorV1 | None = None
    reward: float | None
    rewards: dict[str, float] | None = None
    harbor_exception: str | None = Field(default=None, description="Harbor's exception type, when the trial raised")
    usage: TrialUsageV1 | None = Field(description="null when the run never reached a service")
    service: TrialServiceV1 | None
    timing: TrialTimingV1 | None


class EvaluationRecordV1(Record):
    schema_version: Literal["1"] = "1"
    evaluation_id: str
    tool: Literal["harbor"] = "harbor"
    tool_version: str
    agent: str
    model_connection: Literal["host", "container", "none"] = Field(
        description="host: the agent calls the model from Harbor's process through the gateway on loopback; "
        "container: from inside the trial container, through the gateway's container-facing binding on hitch's "
        "eval network; none: the agent calls no model (oracle)"
    )
    environment: Literal["docker"]
    inference_id: Sha256 | None
    engine: str
    started_at: float
    finished_at: float
    trials: list[TrialOutcomeV1]
