"""The requests of the daemon's management API, one strict model per route body.

The callers build them (:mod:`harness.app.daemon_client` sends ``body()``: the fields that are set, none that is
``None``) and the daemon validates every body with :func:`parse_request` before it acts: an unknown field, a
value of the wrong type (``"1"`` for a number, ``1`` for a flag) or out of range is a ``usage_error`` naming
the field, and nothing starts.

=============================================  ======================
route                                          body
=============================================  ======================
``POST /v1/services/{id}/stop``                :class:`StopServiceRequest`
``POST /v1/services/{id}/unquarantine``        :class:`EmptyRequest`
``POST /v1/acquire``                           :class:`AcquireRequest`
``POST /v1/release``                           :class:`ReleaseRequest`
``POST /v1/prepare``                           :class:`PrepareRequest`
``POST /v1/shutdown``                          :class:`ShutdownRequest`
``POST /v1/runs``                              :class:`RunRequest`
``POST /v1/runs/{id}/finish``                  :class:`FinishRunRequest`
``POST /v1/runs/{id}/cancel``                  :class:`EmptyRequest`
=============================================  ======================

``GET`` routes and ``DELETE /v1/runs/{id}`` take no body.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import ConfigDict, Field, model_validator

from harness.contracts.base import Record, parse_record
from harness.contracts.lock import SamplingV1
from harness.contracts.service import EngineName, LauncherName
from harness.errors import ERROR_TABLE
from harness.lock import ProfileShort, ServedDevice
from harness.service.starter_supervisor import EngineChoice

__all__ = [
    "CAPTURE_MAX_BYTES",
    "DEADLINE_MAX_S",
    "TRIAL_WAIT_S",
    "RUN_ID_PATTERN",
    "AcquireRequest",
    "CaptureMode",
    "DeviceChoiceV1",
    "EmptyRequest",
    "EngineSpec",
    "FinishRunRequest",
    "HarnessArtifactIn",
    "PrepareRequest",
    "ReleaseRequest",
    "Request",
    "RunErrorIn",
    "RunRequest",
    "ShutdownRequest",
    "StopServiceRequest",
    "parse_request",
]

R = TypeVar("R", bound="Request")

CaptureMode = Literal["off", "metadata", "full"]
CAPTURE_MAX_BYTES = 1 << 30  # per request and direction: what one run may put on disk is bounded
TRIAL_WAIT_S = 6 * 3600.0  # the longest a run's trial waits its turn for CPU and RAM (a client waits that long too)
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
DEADLINE_MAX_S = 7 * 24 * 3600.0  # the longest candidate deadline a run may carry


class Request(Record):
    """A request body: strict types (JSON's own), unknown fields refused."""

    model_config = ConfigDict(strict=True)

    def body(self) -> dict[str, Any]:
        """What the client sends: the fields given, without the ``None`` ones and those left at an empty default
        (``[]``, ``false``): what the daemon records of a run's request is what the caller asked for."""
        empty = {n for n, f in type(self).model_fields.items() if not f.get_default(call_default_factory=True)}
        return {k: v for k, v in self.model_dump(mode="json", exclude_none=True).items() if v or k not in empty}


def parse_request(cls: type[R], data: Any) -> R:
    """``data`` (a parsed JSON body) as ``cls``; anything else is a ``usage_error`` naming each bad field."""
    return parse_record(cls, data, "usage_error")


class EmptyRequest(Request):
    """A route that takes no parameters: its body is ``{}`` or absent."""


class StopServiceRequest(Request):
    force: bool = Field(default=False, description="revoke live leases and stop anyway")
    by: str | None = Field(default=None, max_length=200, description="the stopping command, as its runs' records name it")


class ShutdownRequest(Request):
    force: bool = Field(default=True, description="stop services that still have leases")
    drain_timeout_s: float = Field(
        default=0.0, ge=0, le=86_400, description="without force: wait this long for live leases to end, then refuse"
    )
    by: str | None = Field(default=None, max_length=200, description="the stopping command, as its runs' records name it")


class ReleaseRequest(Request):
    lease_id: str


class DeviceChoiceV1(Request):
    """What the caller resolved for ``--device`` and why (:class:`harness.app.choice.Choice`): recorded in the
    prepare event and ``validation.json``."""

    requested: str
    device: ServedDevice
    certified: bool
    allow_uncertified: bool
    reasons: list[str]


class EngineSpec(Request):
    """Which engine a service runs and how (not part of the lock: ``fake`` is for contract runs)."""

    engine: EngineName = "sglang"
    launcher: LauncherName = "process"
    image: str | None = Field(default=None, description="oci: the image ID or digest reference")
    fake_flags: list[str] = Field(default_factory=list, description="the fake engine's extra flags (faults)")

    def engine_choice(self) -> EngineChoice:
        return EngineChoice(self.engine, self.launcher, self.image, tuple(self.fake_flags))


class AcquireRequest(EngineSpec):
    """A lease on the service of a sealed lock (``inference_id``) or of a lock given whole."""

    owner: str = Field(min_length=1)
    inference_id: str | None = None
    lock: dict[str, Any] | None = None
    cache_scope_owner: str | None = None


class PrepareRequest(EngineSpec):
    """``hitch local prepare``: start the service once, probe it, seal and save its lock."""

    model: str = Field(min_length=1, description="local/ALIAS or local/sha256:<hex>")
    device: ServedDevice = "cpu"
    profile: ProfileShort = "baseline"
    runtime: str = Field(min_length=1, description="catalog name or runtime_id")
    context_tokens: int | None = Field(default=None, ge=1)
    generation: SamplingV1 | None = Field(default=None, description="a generation profile's sampling (default greedy)")
    device_choice: DeviceChoiceV1 | None = None
    progress_key: str | None = Field(
        default=None, pattern=RUN_ID_PATTERN, description="the key its phases are shown under (GET /v1/progress/{key})"
    )


class HarnessArtifactIn(Request):
    """The exact harness a run's owner runs (it alone can see it): its compatibility profile is looked up by it."""

    artifact: str = Field(min_length=1, description="e.g. npm:@openai/codex@0.171.0, harbor@0.25.0:terminus-2")
    version: str = Field(min_length=1)
    protocol: Literal["responses", "chat-completions"]


class RunRequest(EngineSpec):
    """A run on the daemon's gateway: a sealed ``inference_id``, or a model, device, profile and runtime (prepared
    first when it has no sealed lock yet)."""

    run_id: str | None = Field(default=None, pattern=RUN_ID_PATTERN, description="default: random")
    harness: str | None = Field(default=None, description="model-call | codex | harbor:<agent>; none for local serve")
    harness_artifact: HarnessArtifactIn | None = Field(
        default=None, description="codex, a Harbor agent that calls a model: the artifact its profile is keyed by"
    )
    certifying: bool = Field(
        default=False,
        description="the run certifies its harness (pytest certify): admitted without a recorded profile, and kept so "
        "in run.json",
    )
    capture: CaptureMode = "metadata"
    capture_max_bytes: int | None = Field(default=None, ge=1, le=CAPTURE_MAX_BYTES)
    for_containers: bool = Field(default=False, description="serve eval containers on hitch's eval network")
    eval_image: str | None = Field(default=None, description="for_containers: the image the eval containers run")
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        le=DEADLINE_MAX_S,
        description="the run's candidate deadline: each request's timeout is min(time left, the lock's request timeout)",
    )
    rerun_of: str | None = Field(default=None, pattern=RUN_ID_PATTERN, description="hitch run rerun: the run asked again")
    cache_scope_owner: str | None = Field(
        default=None,
        pattern=RUN_ID_PATTERN,
        description="the cache scope the run's service is shared in (spec §8.3; a radix-cache lock only): runs naming "
        "the same scope share one service (an evaluation's trials: its evaluation id); default: the run's own",
    )
    inference_id: str | None = None
    model: str | None = None
    device: ServedDevice = "cpu"
    profile: ProfileShort = "baseline"
    runtime: str | None = None
    generation: SamplingV1 | None = Field(
        default=None, description="a generation profile's sampling for the drafted lock (default greedy; not with inference_id)"
    )
    device_choice: DeviceChoiceV1 | None = None
    trial: dict[str, Any] | None = Field(
        default=None, description="{cpus, memory_mb}: the trial container it serves (checked by the daemon's ledger)"
    )
    submission: dict[str, Any] | None = Field(
        default=None,
        description="what the harness itself is asked (hitch run: prompt digest, budget, agent args, workdir; a Harbor "
        "trial: task, agent kwargs, attempt); part of the run's identity, kept as its digest only",
    )

    @model_validator(mode="after")
    def _service_named(self) -> RunRequest:
        if not self.inference_id and not (self.model and self.runtime):
            raise ValueError("a run needs an inference_id, or a model and a runtime")
        if self.inference_id and self.generation is not None:
            raise ValueError("a sealed lock (inference_id) fixes its sampling: no generation beside it")
        return self


class RunErrorIn(Request):
    code: str
    message: str = ""


class FinishRunRequest(Request):
    """How a run ended, told by its owner (the CLI with the harness's status, an evaluation's trial)."""

    status: Literal["completed", "failed", "cancelled"]
    error: RunErrorIn | None = None

    @model_validator(mode="after")
    def _error_for_a_failure(self) -> FinishRunRequest:
        if self.status != "completed" and (self.error is None or self.error.code not in ERROR_TABLE):
            raise ValueError("a run that did not complete ends with an error code of the table")
        return self
