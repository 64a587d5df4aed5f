"""What an engine says it is working on: requests running and waiting, read from SGLang's own figures.

Owns :class:`EngineLoad` and the two parsers of SGLang 0.5.23's answers (reference sglang-http-api.md §1.1
and §8): ``GET /v1/loads`` (JSON, one entry per data-parallel rank: ``num_running_reqs``,
``num_waiting_reqs``, and ``timestamp``: the wall-clock second the scheduler took that rank's snapshot) and,
where that route is missing, the ``/metrics`` gauges ``sglang:num_running_reqs`` and ``sglang:num_queue_reqs``.
Readiness waits on it before flushing the cache; the gateway's abort check and the certification's probes read
it to see a slot freed. No I/O here: callers fetch with their own client.

A snapshot can be older than the request it should show: SGLang publishes it after a prefill, on every idle
loop and every ``load_snapshot_publish_interval`` decode steps (15 by default; the lock's engines run with 1,
``harness.engine.argv``). :attr:`EngineLoad.taken_at` says when, so a caller can refuse a figure taken before
the event it waits on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LOADS_PATH", "METRICS_PATH", "EngineLoad", "load_from_loads", "load_from_metrics"]

LOADS_PATH = "/v1/loads"
METRICS_PATH = "/metrics"
_RUNNING_GAUGE = "sglang:num_running_reqs"
_WAITING_GAUGE = "sglang:num_queue_reqs"


@dataclass(frozen=True)
class EngineLoad:
    running: int
    waiting: int
    taken_at: float | None = None  # the oldest rank's snapshot time (``/v1/loads``); None: not stated (``/metrics``)

    @property
    def total(self) -> int:
        return self.running + self.waiting

    @property
    def idle(self) -> bool:
        return self.total == 0


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def load_from_loads(body: Any) -> EngineLoad | None:
    """``/v1/loads``' JSON summed over its ranks; ``None`` when the body is not that shape."""
    loads = body.get("loads") if isinstance(body, dict) else None
    if not isinstance(loads, list):
        return None
    entries = [x for x in loads if isinstance(x, dict)]
    times = [float(s) for x in entries if isinstance(s := x.get("timestamp"), int | float) and not isinstance(s, bool)]
    return EngineLoad(
        running=sum(_count(x.get("num_running_reqs")) for x in entries),
        waiting=sum(_count(x.get("num_waiting_reqs")) for x in entries),
        taken_at=min(times) if entries and len(times) == len(entries) else None,
    )


def load_from_metrics(text: str) -> EngineLoad:
    """The running and queued gauges of a Prometheus exposition, summed over their label sets."""
    running = waiting = 0.0
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in (_RUNNING_GAUGE, _WAITING_GAUGE):
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        if name == _RUNNING_GAUGE:
            running += value
        else:
            waiting += value
    return EngineLoad(running=int(running), waiting=int(waiting))
