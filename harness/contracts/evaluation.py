"""EvaluationRecordV1: one ``hitch eval harbor`` run, ``evals/<eval-id>/evaluation.json``.

One record per evaluation, one :class:`TrialOutcomeV1` per trial. Each trial was its own run (its own
binding, token, evidence and budget, ``runs/<run-id>/``): its terminal status and error code are that run's
(RunRecordV1's statuses), its request count and token totals come from the gateway's attempt rows in the run's
execution evidence — never from the agent's own count — and ``service`` names the service entry the trial
was served by. The reward is the verifier's, ``null`` when no verifier ran (a cancelled or failed trial) and
``null`` whenever the engine failed under the trial (an infrastructure failure is never a reward of 0).

A trial whose engine failed (``inference_process_exited``, ``inference_oom``, ``inference_engine_unhealthy``:
:mod:`harness.daemon.run_infra`) is run again, up to ``infrastructure_retries`` times, with the same lock in a
new run (new run id, binding and token; a new service epoch when the old one failed): the outcome is the last
attempt's, and ``attempts`` keeps each failed one (its run's evidence stays under ``runs/<run-id>/``, its
Harbor trial folder under ``trials/``). ``resources`` are the CPU and RAM limits of the trial's container,
held in the daemon's resource ledger while it ran.

:class:`EvaluationPlanV1` (``evals/<eval-id>/plan.json``) is what the evaluation was asked, written before its
first trial: the trial slots (task x attempt) in order, the agent and its options, and the run body (engine,
launcher, capture; never a token). With the outcome each finished trial leaves under ``outcomes/<slot>.json``
it is what ``hitch eval harbor resume`` needs to run the trials that have no terminal result, on the same lock.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, model_validator

from harness.contracts.base import Record, Sha256
from harness.contracts.run import RunErrorV1

__all__ = [
    "EvaluationPlanV1",
    "EvaluationRecordV1",
    "TaskVerifierV1",
    "TrialOutcomeV1",
    "TrialResourcesV1",
    "TrialServiceV1",
    "TrialSlotV1",
    "TrialTimingV1",
    "TrialUsageV1",
]


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


class TrialResourcesV1(Record):
    """The trial container's limits (Docker ``cpus`` and memory), as reserved in the resource ledger."""

    cpus: float = Field(gt=0, description="CPU quota in cores (may be fractional): never pinned cores")
    memory_mb: int = Field(ge=1)


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
    resources: TrialResourcesV1 | None = None
    attempts: list[TrialOutcomeV1] = Field(
        default_factory=list,
        description="the earlier attempts of this trial, oldest first: each failed for infrastructure (the engine "
        "failed under it) and was run again with the same lock in a new run",
    )

    @model_validator(mode="after")
    def _attempts_failed_for_infrastructure(self) -> Self:
        for earlier in self.attempts:
            if earlier.status != "failed" or earlier.error is None or earlier.reward is not None or earlier.attempts:
                raise ValueError("an earlier attempt is a failed one, with its code, no reward and no attempts of its own")
        return self


class TaskVerifierV1(Record):
    """Who scores one task's trials (spec §11.1: the verifier is a role of its own; hitch never redirects it)."""

    task: str
    role: Literal["tests", "model-judge"] = Field(
        description="tests: the task's test script alone scores a trial; model-judge: the verifier is handed a "
        "credential ([verifier] env), so it calls a model of its own"
    )
    locality: Literal["local", "remote-or-unknown"] = Field(
        description="local: it calls no model; remote-or-unknown: a judge whose model hitch neither serves nor knows"
    )
    credential_env: list[str] = Field(description="the names (never the values) of the credentials it is handed")
    network_mode: str | None = Field(description="[verifier] network_mode as the task declares it; null: not declared")

    @model_validator(mode="after")
    def _local_only_without_a_judge(self) -> Self:
        if (self.locality == "local") != (self.role == "tests") or (self.role == "tests") != (not self.credential_env):
            raise ValueError("a verifier is local exactly when it is the tests alone, handed no credential")
        return self


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
    agent_profile_id: Sha256 | None = Field(
        default=None, description="the agent's passing compatibility profile it was admitted with (null: calls no model)"
    )
    infrastructure_retries: int = Field(
        default=1, ge=0, description="how many times a trial whose engine failed was allowed to run again"
    )
    started_at: float
    finished_at: float
    trials: list[TrialOutcomeV1]
    resumed: int = Field(default=0, ge=0, description="how many times hitch eval harbor resume ran this evaluation's trials")
    regrade_of: str | None = Field(
        default=None, description="the evaluation whose kept trial outputs this one re-scored (verifier only, no model)"
    )
    model_capture: Literal["off", "metadata", "full"] | None = Field(
        default=None, description="the capture mode of every trial's run (--model-capture); null in older records"
    )
    require_model_capture: bool = Field(
        default=False, description="a trial whose capture was incomplete failed the evaluation (--require-model-capture)"
    )
    candidate_locality: Literal["local"] = Field(
        default="local", description="the candidate's model: always this host's engine, through the gateway"
    )
    verifiers: list[TaskVerifierV1] | None = Field(
        default=None, description="each task's verifier role and locality; null in older records"
    )
    offline: bool = Field(
        default=False,
        description="the evaluation can run offline: the candidate and every verifier are local (never claimed otherwise)",
    )
    error: RunErrorV1 | None = Field(
        default=None,
        description="set when the evaluation failed closed (inference_capture_incomplete under --require-model-capture): "
        "no trial started after the one named, live ones were cancelled",
    )

    @model_validator(mode="after")
    def _offline_only_when_every_verifier_is_local(self) -> Self:
        if self.offline and (self.verifiers is None or any(v.locality != "local" for v in self.verifiers)):
            raise ValueError("offline is claimed only when every verifier is local too")
        return self


class TrialSlotV1(Record):
    slot: int = Field(ge=0)
    task: str = Field(description="the task directory, absolute")
    attempt: int = Field(ge=0, description="which of the -k trials of the task")


class EvaluationPlanV1(Record):
    schema_version: Literal["1"] = "1"
    evaluation_id: str
    agent: str
    environment: Literal["docker"]
    k: int = Field(ge=1)
    n_concurrent: int = Field(ge=1)
    agent_kwargs: dict[str, Any]
    agent_paths: list[str]
    agent_timeout_s: float | None
    infra_retries: int = Field(ge=0)
    agent_profile_id: Sha256 | None = Field(description="the compatibility profile the agent was admitted with")
    eval_image: str | None
    require_model_capture: bool = Field(default=False, description="--require-model-capture (false in older plans)")
    run_body: dict[str, Any] = Field(description="the runs' request (engine, launcher, capture, ...); no secret")
    inference_id: Sha256 | None = Field(description="the lock every trial runs, once the first trial's run sealed it")
    slots: list[TrialSlotV1]
    created_at: float
