"""The session's timeline as it is recorded: timed spans in every test process, the CPU over the session.

Each process keeps the spans it recorded in a process-wide list: :func:`span` around a step (the session
engine's start, the reference computation, a private daemon or engine start), :func:`record` for a span
timed elsewhere (a check's call phase, a fixture's setup or teardown: :mod:`certify.plugin` hooks them).
The plugin drains the list into the test report of the phase that paid for them (``certify_spans`` user
property), so under pytest-xdist they reach the controlling process with the check's results; there
:func:`build_timeline` makes the :class:`~harness.contracts.timeline.CertificationTimelineV1` that
``results.json`` carries. The CPU figure reads ``/proc/stat`` at the session's start and end
(:func:`cpu_sample`, :func:`cpu_usage`); where it cannot be read the timeline says nothing about the CPU.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contracts.timeline import CertificationTimelineV1, CpuUsageV1, QuietPhaseV1, SpanEngine, TimelineSpanV1

__all__ = [
    "CpuSample",
    "build_timeline",
    "cpu_between",
    "cpu_sample",
    "cpu_usage",
    "drain",
    "record",
    "record_quiet",
    "span",
    "worker_name",
]

PROC_STAT = Path("/proc/stat")
_SPANS: list[dict[str, Any]] = []
_MUTEX = threading.Lock()  # steps may run on helper threads (a private gateway's loop)


def worker_name() -> str:
    """This process's lane: the pytest-xdist worker id, or ``main`` in a session without workers."""
    return os.environ.get("PYTEST_XDIST_WORKER") or "main"


def record(
    kind: str,
    name: str,
    start: float,
    end: float,
    *,
    phase: str = "call",
    engine: SpanEngine | None = None,
    check: str | None = None,
    scope: str | None = None,
    worker: str | None = None,
    keep: bool = True,
) -> dict[str, Any]:
    """One span (epoch seconds) of this process, kept until the next :func:`drain` (unless ``keep`` is false:
    the caller holds it itself); returns it."""
    end = max(end, start)
    row: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "phase": phase,
        "check": check,
        "scope": scope,
        "worker": worker or worker_name(),
        "pid": os.getpid(),
        "engine": engine,
        "start": round(start, 6),
        "end": round(end, 6),
        "duration_s": round(round(end, 6) - round(start, 6), 6),
    }
    if keep:
        with _MUTEX:
            _SPANS.append(row)
    return row


@contextlib.contextmanager
def span(name: str, *, engine: SpanEngine | None = None) -> Iterator[None]:
    """Time the block as a ``step`` span named ``name`` (kept whether the block succeeds or raises)."""
    start = time.time()
    try:
        yield
    finally:
        record("step", name, start, time.time(), engine=engine)


def record_quiet(row: dict[str, Any], *, waited_from: float) -> None:
    """A quiet phase (:mod:`certify.quiet`): its row (kind ``quiet``, split out of the spans by
    :func:`build_timeline`) and, when it waited for the machine's turn, that wait as a ``wait`` span."""
    if row["start"] - waited_from >= 0.01:
        record("wait", f"machine turn for {row['name']}", waited_from, row["start"])
    with _MUTEX:
        _SPANS.append({"kind": "quiet", **row})


def drain() -> list[dict[str, Any]]:
    """The spans recorded since the last call, oldest first."""
    with _MUTEX:
        out = list(_SPANS)
        _SPANS.clear()
    return out


@dataclass(frozen=True)
class CpuSample:
    """One reading of the machine's CPU counters (``/proc/stat``'s aggregate line), in seconds."""

    at: float  # epoch seconds
    user_s: float  # user + nice
    system_s: float
    cores: int


def cpu_sample(stat: Path = PROC_STAT) -> CpuSample | None:
    """The machine's CPU time so far, or None where ``/proc/stat`` is absent or unreadable (not Linux)."""
    try:
        lines = stat.read_text(encoding="ascii").splitlines()
        fields = lines[0].split()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
    cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    if fields[:1] != ["cpu"] or len(fields) < 4 or cores < 1 or ticks <= 0:
        return None
    user, nice, system = (int(v) for v in fields[1:4])
    return CpuSample(time.time(), (user + nice) / ticks, system / ticks, cores)


def cpu_between(first: CpuSample | None, last: CpuSample | None) -> tuple[float, float] | None:
    """The machine's (user, system) CPU seconds between two samples; None without both or over no time."""
    if first is None or last is None or last.at <= first.at:
        return None
    return max(0.0, last.user_s - first.user_s), max(0.0, last.system_s - first.system_s)


def cpu_usage(first: CpuSample | None, last: CpuSample | None) -> CpuUsageV1 | None:
    """(user + system) / (wall x cores) between two samples; None without both or over no time."""
    used = cpu_between(first, last)
    if first is None or last is None or used is None:
        return None
    user, system = used
    cores = max(first.cores, last.cores)
    return CpuUsageV1(
        cores=cores,
        user_s=round(user, 3),
        system_s=round(system, 3),
        utilisation=round((user + system) / ((last.at - first.at) * cores), 4),
    )


def build_timeline(
    started_at: float, ended_at: float, spans: Sequence[dict[str, Any]], cpu: CpuUsageV1 | None
) -> CertificationTimelineV1:
    """The session's timeline record from every process's spans (sorted by start) and quiet phases."""
    quiet = sorted(
        (
            QuietPhaseV1.model_validate({k: v for k, v in s.items() if k not in ("kind", "phase")})
            for s in spans
            if s["kind"] == "quiet"
        ),
        key=lambda q: q.start,
    )
    rows = sorted(
        (TimelineSpanV1.model_validate(s) for s in spans if s["kind"] != "quiet"), key=lambda s: (s.start, -s.end, s.worker)
    )
    ended_at = max(ended_at, started_at)
    return CertificationTimelineV1(
        started_at=round(started_at, 6),
        ended_at=round(ended_at, 6),
        wall_s=round(round(ended_at, 6) - round(started_at, 6), 6),
        spans=rows,
        cpu=cpu,
        quiet=quiet,
        cpu_outside_quiet=_outside(cpu, ended_at - started_at, quiet),
    )


def _outside(cpu: CpuUsageV1 | None, wall_s: float, quiet: Sequence[QuietPhaseV1]) -> float | None:
    """The machine's utilisation over the session less its quiet phases (None without the CPU figures)."""
    if cpu is None or any(q.cpu_s is None for q in quiet):
        return None
    rest_wall = wall_s - sum(q.end - q.start for q in quiet)
    rest_cpu = cpu.user_s + cpu.system_s - sum(q.cpu_s or 0.0 for q in quiet)
    if rest_wall <= 0:
        return None
    return round(max(0.0, rest_cpu) / (rest_wall * cpu.cores), 4)
