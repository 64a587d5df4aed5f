"""The quiet phase: a check whose figure is a timing runs alone on the machine, and only on a quiet machine.

The timings a certificate signs (the gateway's added latency, cancel-to-free, idle stop, recovery after a kill)
mean something only if nothing else loaded the machine while they were taken. :func:`quiet_phase` wraps such a
measurement (a check marked ``quiet``, or the part of a fixture that takes the timing):

- under pytest-xdist it holds the machine's turn alone (:func:`machine_turn`, ``LOCK_EX``); every other
  certification test holds it shared while it runs, so the checks that start private engines or run Harbor trials
  overlap each other and the session's protocol checks, never a timing. A waiting quiet phase closes a gate first,
  so the shared holders cannot starve it;
- before the timing it waits for the machine to settle: the busy cores (``/proc/stat``: user + nice + system)
  over :data:`WINDOW_S` windows, for at most :data:`SETTLE_S`. An idle engine sleeps (``--sleep-on-idle``, about
  0.01 cores), so what a window reads is other work;
- after it, the same reading again (a load that started during the timing is still there when it ends);
- a reading above the limit refuses the timing (:class:`TimingRefused`): the check fails saying how loaded the
  machine was, and the figure is not recorded.

The limit is ``--quiet-load``: ``auto`` (the default: ``max(0.5, cores / 4)`` busy cores), a number of cores, or
``off`` (the phase is taken and read but nothing is refused: its rows say ``unguarded``; the project's own tests
run certifications beside other work and use it). Every phase is a row of the session's timeline
(:class:`harness.contracts.timeline.QuietPhaseV1`) and a detail of the check it belongs to.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from certify.timeline import CpuSample, cpu_between, cpu_sample, record_quiet, worker_name

__all__ = [
    "SETTLE_S",
    "WINDOW_S",
    "QuietLimit",
    "QuietPhase",
    "TimingRefused",
    "busy_cores",
    "held_turn",
    "machine_turn",
    "parse_limit",
    "quiet_phase",
    "settle",
]

WINDOW_S = 0.5  # one reading of the machine's busy cores
SETTLE_S = 30.0  # how long a phase waits for the machine to settle before it refuses
QuietVerdict = Literal["quiet", "refused", "unguarded"]


class TimingRefused(AssertionError):
    """A timing taken (or about to be taken) on a loaded machine: the check fails, the figure is not recorded."""


@dataclass(frozen=True)
class QuietLimit:
    """The most busy cores a quiet machine shows (None: ``off``, read but not enforced), and how it was set."""

    cores: float | None
    setting: str

    def over(self, busy: float | None) -> bool:
        return self.cores is not None and busy is not None and busy > self.cores


def parse_limit(value: str, cores: int) -> QuietLimit:
    """``auto`` (max(0.5, cores / 4)), ``off``, or a positive number of cores; a ValueError names the choices."""
    text = value.strip().lower()
    if text == "auto":
        return QuietLimit(round(max(0.5, cores / 4), 3), "auto")
    if text == "off":
        return QuietLimit(None, "off")
    try:
        number = float(text)
    except ValueError:
        number = -1.0
    if not number > 0:
        raise ValueError(f"--quiet-load is auto, off or a positive number of cores, not {value!r}")
    return QuietLimit(number, text)


def busy_cores(window_s: float = WINDOW_S) -> float | None:
    """The machine's busy cores over one window, or None where ``/proc/stat`` cannot be read."""
    first = cpu_sample()
    time.sleep(window_s)
    last = cpu_sample()
    used = cpu_between(first, last)
    if first is None or last is None or used is None:
        return None
    return round(sum(used) / (last.at - first.at), 3)


def settle(limit: QuietLimit, wait_s: float = SETTLE_S, window_s: float = WINDOW_S) -> tuple[float | None, float]:
    """Read the machine until a window is within the limit or ``wait_s`` has passed: (the last reading, seconds
    waited beyond the first window). With the limit off, one window is read."""
    start = time.monotonic()
    busy = busy_cores(window_s)
    while limit.over(busy) and time.monotonic() - start < wait_s:
        busy = busy_cores(window_s)
    return busy, round(max(0.0, time.monotonic() - start - window_s), 3)


@dataclass
class QuietPhase:
    """One quiet phase: what it measured, the machine's readings around it, and its verdict."""

    name: str
    limit: QuietLimit
    start: float = 0.0
    end: float = 0.0
    before_cores: float | None = None
    after_cores: float | None = None
    waited_s: float = 0.0
    verdict: QuietVerdict = "quiet"
    reason: str = ""
    cpu_s: float | None = None
    _first: CpuSample | None = None

    def row(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "check": None,
            "worker": worker_name(),
            "start": round(self.start, 6),
            "end": round(max(self.end, self.start), 6),
            "limit_cores": self.limit.cores,
            "limit_setting": self.limit.setting,
            "before_cores": self.before_cores,
            "after_cores": self.after_cores,
            "waited_s": self.waited_s,
            "cpu_s": self.cpu_s,
            "verdict": self.verdict,
            "reason": self.reason,
        }

    def detail(self) -> dict[str, Any]:
        """What a check's record says of the phase its figure was taken in."""
        row = self.row()
        return {k: row[k] for k in ("limit_cores", "limit_setting", "before_cores", "after_cores", "waited_s", "verdict")}

    def begin(self, settle_s: float = SETTLE_S) -> None:
        """The machine's turn is held: wait for it to settle, refuse when it does not."""
        self.start = time.time()
        self._first = cpu_sample()
        self.before_cores, self.waited_s = settle(self.limit, settle_s)
        if self.limit.over(self.before_cores):
            self._refuse("before", self.before_cores)

    def finish(self, settle_s: float = SETTLE_S) -> None:
        """The timing is taken: read the machine again, refuse when it is loaded."""
        self.after_cores, waited = settle(self.limit, settle_s)
        self.waited_s = round(self.waited_s + waited, 3)
        if self.limit.over(self.after_cores):
            self._refuse("after", self.after_cores)
        if self.limit.cores is None:
            self.verdict = "unguarded"

    def close(self, waited_from: float) -> None:
        """The phase is over (whatever happened in it): its row joins the session's timeline."""
        self.end = time.time()
        used = cpu_between(self._first, cpu_sample())
        if used is not None:
            self.cpu_s = round(sum(used), 3)
        record_quiet(self.row(), waited_from=waited_from)

    def _refuse(self, when: str, busy: float | None) -> None:
        self.verdict = "refused"
        self.reason = (
            f"timing refused: the machine carried {busy} busy cores {when} the measurement of {self.name} "
            f"(a quiet machine shows at most {self.limit.cores}, --quiet-load {self.limit.setting}; waited "
            f"{self.waited_s} s for it to settle); the figure is not recorded"
        )
        raise TimingRefused(self.reason)


class _Turn:
    """This process's hold on one of the session's turns (``name``: the machine's, the session engine's): one
    lock file per session folder and name, re-entrant (a fixture's setup holds it shared while the quiet phase
    inside it asks for it alone: the hold is converted, and converted back when the phase ends)."""

    def __init__(self, lock_dir: Path, name: str) -> None:
        self.gate = (lock_dir / f"{name}-gate.lock").open("a")
        self.turn = (lock_dir / f"{name}-turn.lock").open("a")
        self.holds: dict[int, bool] = {}  # token -> exclusive?
        self.count = 0
        self.mutex = threading.Lock()  # one thread of this process takes or gives a turn at a time

    def _mode(self) -> int | None:
        if not self.holds:
            return None
        return fcntl.LOCK_EX if any(self.holds.values()) else fcntl.LOCK_SH

    def _lock(self, mode: int) -> None:
        if mode == fcntl.LOCK_EX:
            fcntl.flock(self.gate, fcntl.LOCK_EX)  # later shared requests wait behind this one
            try:
                fcntl.flock(self.turn, fcntl.LOCK_EX)
            finally:
                fcntl.flock(self.gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(self.gate, fcntl.LOCK_SH)  # passes unless an exclusive request waits or holds
            fcntl.flock(self.gate, fcntl.LOCK_UN)
            fcntl.flock(self.turn, fcntl.LOCK_SH)

    def take(self, exclusive: bool) -> int:
        """Add a hold (returned: its token for :meth:`give`); locks, or converts to alone, as it needs to."""
        with self.mutex:
            before = self._mode()
            self.count += 1
            self.holds[self.count] = exclusive
            token, after = self.count, self._mode()
        if before is None:
            assert after is not None
            self._lock(after)
        elif after != before:  # shared to alone: converted in place (the gate is for newcomers; it would deadlock
            fcntl.flock(self.turn, fcntl.LOCK_EX)  # with an exclusive request that waits for our shared hold)
        return token

    def give(self, token: int) -> None:
        """Drop a hold (holds need not end in the order they began: a fixture's setup ends before its check)."""
        with self.mutex:
            before = self._mode()
            del self.holds[token]
            after = self._mode()
        if after is None:
            fcntl.flock(self.turn, fcntl.LOCK_UN)
        elif after != before:
            fcntl.flock(self.turn, after)  # back to shared: never waits (an exclusive holder is never beside us)


_TURNS: dict[tuple[Path, str], _Turn] = {}


@contextlib.contextmanager
def held_turn(lock_dir: Path | None, name: str, *, exclusive: bool) -> Iterator[None]:
    """Hold the session's turn ``name`` shared or alone among its processes (see :func:`machine_turn`)."""
    if lock_dir is None:
        yield
        return
    turn = _TURNS.get((lock_dir, name))
    if turn is None:
        turn = _TURNS[(lock_dir, name)] = _Turn(lock_dir, name)
    token = turn.take(exclusive)
    try:
        yield
    finally:
        turn.give(token)


@contextlib.contextmanager
def machine_turn(lock_dir: Path | None, *, exclusive: bool) -> Iterator[None]:
    """Hold the machine shared (``LOCK_SH``) or alone (``LOCK_EX``) among the session's processes (``lock_dir``:
    the session's folder; None outside xdist, where nothing else of the session runs at once). An exclusive
    request closes a gate first, so shared requests that come after it wait behind it; holds nest within a
    process (an exclusive one inside a shared one converts it)."""
    with held_turn(lock_dir, "machine", exclusive=exclusive):
        yield


@contextlib.contextmanager
def quiet_phase(name: str, limit: QuietLimit, lock_dir: Path | None, *, settle_s: float = SETTLE_S) -> Iterator[QuietPhase]:
    """Run the block as a quiet phase (module doc): the machine alone, settled before, read after; refused
    (:class:`TimingRefused`) when a reading is over the limit. The phase's row joins the session's timeline
    whatever its verdict."""
    phase = QuietPhase(name, limit)
    waited_from = time.time()
    with machine_turn(lock_dir, exclusive=True):
        try:
            phase.begin(settle_s)
            yield phase
            phase.finish(settle_s)
        finally:
            phase.close(waited_from)
