"""What an engine says it is working on: requests running and waiting, read from SGLang's own figures.

Owns :class:`EngineLoad` and the two parsers of SGLang 0.5.23's answers (reference sglang-http-api.md §1.1
and §8): ``GET /v1/loads`` (JSON, one entry per data-parallel rank: ``num_running_reqs``,
``num_waiting_reqs``) and, where that route is missing, the ``/metrics`` gauges ``sglang:num_running_reqs``
and ``sglang:num_queue_reqs``. Readiness waits on it before flushing the cache; the certification's probes
read it to see a slot freed. No I/O here: callers fetch with their own client.
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
    return EngineLoad(
        running=sum(_count(x.get("num_running_reqs")) for x in entries),
        waiting=sum(_count(x.get("num_waiting_reqs")) for x in entries),
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
