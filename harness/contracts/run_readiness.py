"""What a run's execution evidence says of its service's readiness and of the engine's memory while it lived.

Spec §12.1 asks each execution to keep the service's queueing and cold-start time, whether a loaded service was
reused, the warm-up probe as its own record, and the service's RSS (or GPU memory) over time.

- :class:`RunReadinessV1`: the readiness report of the service epoch that served the run (the steps it passed and
  when), whether this run's acquire (or the prepare made for it) started that engine, the cold-start time (the
  engine's launch until readiness passed) and the warm-up time (readiness's own short Responses and SSE
  generations: never candidate output, never counted as the run's tokens) when it did, and the tool-call probe
  (spec §9.1 step 5) when the run's harness needs tool calls of a lock that claims them.
- :class:`EngineMemorySeriesV1`: the engine's resident memory, sampled while the run was live — a bounded series
  (a point when the run is bound, every ``interval_s`` after, one when it ends; past ``max_points`` every other
  point is dropped and the interval doubles). GPU memory is not sampled: ``vram_bytes`` is null in every point.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.contracts.base import Record

__all__ = ["EngineMemorySampleV1", "EngineMemorySeriesV1", "RunReadinessV1", "ToolCallProbeV1"]


class ToolCallProbeV1(Record):
    """The forced tool-call probe of the service's epoch (``harness.engine.readiness.probe_tool_call``)."""

    passed: Literal[True] = Field(default=True, description="a failed probe fails the run before it is bound")
    seconds: float = Field(ge=0, description="how long the probe took")
    by_this_run: bool = Field(
        description="this run's creation probed the epoch; false when an earlier run of the same epoch did (the probe "
        "runs once per epoch and the figures are that probe's)"
    )


class RunReadinessV1(Record):
    """How the service epoch that served the run became ready (seconds since its readiness probe began)."""

    service_id: str
    epoch: int = Field(ge=0)
    started_by_run: bool = Field(
        description="this run's acquire, or the prepare made for it, started this epoch's engine (a cold start); "
        "false when the run reused a service already running or started for another run"
    )
    steps: list[str] = Field(description="the readiness steps passed, in order")
    health_s: float | None = None
    server_info_s: float | None = None
    responses_s: float | None = None
    stream_s: float | None = None
    flushed_s: float | None = None
    idle_wait_s: float | None = None
    busy_polls: int = Field(ge=0)
    flush_attempts: int = Field(ge=0)
    engine_version: str | None = None
    probe_output_tokens: int | None = Field(default=None, description="the warm-up Responses answer's output tokens")
    cold_start_ms: float | None = Field(
        ge=0,
        description="the engine's launch until readiness passed, when this run started it; null when it reused a service",
    )
    warmup_ms: float | None = Field(
        ge=0,
        description="readiness's warm-up generations (one Responses and one SSE answer, after /server_info matched "
        "the lock), when this run started the engine; null otherwise",
    )
    tool_call_required: bool = Field(description="the run's harness needs tool calls and the lock claims them")
    tool_call: ToolCallProbeV1 | None = Field(description="the epoch's tool-call probe; null when not required")

    @model_validator(mode="after")
    def _consistent(self) -> RunReadinessV1:
        if (self.tool_call is not None) != self.tool_call_required:
            raise ValueError("tool_call is set exactly when the tool-call probe was required")
        if not self.started_by_run and (self.cold_start_ms is not None or self.warmup_ms is not None):
            raise ValueError("cold_start_ms and warmup_ms are this run's start's only")
        return self


class EngineMemorySampleV1(Record):
    t_s: float = Field(ge=0, description="seconds since the first sample (a monotonic clock)")
    at: float = Field(description="wall-clock time of the sample")
    rss_bytes: int | None = Field(
        ge=0,
        description="resident memory of the engine's process and its descendants (each process's RSS, summed); null "
        "when the engine could not be read at that moment (gone, not ours any more)",
    )
    vram_bytes: None = Field(default=None, description="GPU memory: not sampled (always null)")


class EngineMemorySeriesV1(Record):
    """The engine's memory while the run was live (a service shared by runs: the service's, not the run's share)."""

    source: Literal["process_tree", "unavailable"] = Field(
        description="process_tree: the engine's host process and its descendants (process launcher); unavailable: "
        "the engine was not a process this daemon could read (a container)"
    )
    unavailable_reason: str | None = None
    interval_s: float = Field(gt=0, description="the sampling interval at the end (it doubles each time points are thinned)")
    max_points: int = Field(ge=2)
    thinned: int = Field(ge=0, description="times every other point was dropped to stay within max_points")
    points: list[EngineMemorySampleV1]

    @model_validator(mode="after")
    def _bounded(self) -> EngineMemorySeriesV1:
        if len(self.points) > self.max_points:
            raise ValueError("more points than max_points")
        if any(b.t_s < a.t_s for a, b in zip(self.points, self.points[1:], strict=False)):
            raise ValueError("points are in time order")
        if (self.source == "unavailable") != (self.unavailable_reason is not None):
            raise ValueError("unavailable_reason is set exactly when the source is unavailable")
        return self
