"""The quiet phase (certify.quiet): its limit, the machine's turn, a refusal on a machine loaded on purpose, and
the timeline's rows. No test here asserts that this machine is quiet (that depends on what else runs): the load
that matters is made by the test, and more load only makes a refusal surer."""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from certify.quiet import QuietLimit, QuietPhase, TimingRefused, busy_cores, machine_turn, parse_limit, quiet_phase
from certify.timeline import build_timeline, drain
from harness.contracts.timeline import CpuUsageV1

BURN = "while True: pass"


@contextlib.contextmanager
def burners(n: int = 2) -> Iterator[None]:
    """``n`` processes that each keep a core busy until the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)


def test_the_limit_is_auto_off_or_a_number_of_cores() -> None:
    assert parse_limit("auto", 2) == QuietLimit(0.5, "auto")
    assert parse_limit("auto", 16) == QuietLimit(4.0, "auto")
    assert parse_limit("off", 2) == QuietLimit(None, "off")
    assert parse_limit("1.5", 2) == QuietLimit(1.5, "1.5")
    for bad in ("0", "-1", "loud", ""):
        with pytest.raises(ValueError, match="auto, off or a positive number"):
            parse_limit(bad, 2)
    assert QuietLimit(0.5, "auto").over(0.6) and not QuietLimit(0.5, "auto").over(0.5)
    assert not QuietLimit(None, "off").over(2.0) and not QuietLimit(0.5, "auto").over(None)


def test_a_loaded_machine_reads_busy_and_refuses_the_timing_with_its_reading() -> None:
    drain()
    limit = QuietLimit(0.25, "0.25")
    measured = False
    with burners(), pytest.raises(TimingRefused) as err:
        assert (busy_cores(0.5) or 0.0) > 0.25  # two processes spinning: well over a quarter of a core
        with quiet_phase("a timing", limit, None, settle_s=0.0):
            measured = True
    assert not measured, "a phase refused before it starts runs nothing"
    assert "timing refused" in str(err.value) and "before the measurement of a timing" in str(err.value)
    assert "--quiet-load 0.25" in str(err.value) and "the figure is not recorded" in str(err.value)
    rows = [s for s in drain() if s["kind"] == "quiet"]
    assert len(rows) == 1 and rows[0]["verdict"] == "refused" and rows[0]["before_cores"] > 0.25
    assert rows[0]["after_cores"] is None and rows[0]["limit_cores"] == 0.25


def test_a_load_that_starts_during_the_timing_refuses_it_after() -> None:
    phase = QuietPhase("a timing", QuietLimit(0.25, "0.25"))  # finish() alone: no before-reading is taken
    with burners(), pytest.raises(TimingRefused, match="after the measurement of a timing"):
        phase.finish(settle_s=0.0)
    assert phase.verdict == "refused" and (phase.after_cores or 0.0) > 0.25


def test_with_the_limit_off_the_phase_is_read_and_marked_unguarded() -> None:
    drain()
    with burners(), quiet_phase("a timing", QuietLimit(None, "off"), None, settle_s=0.0) as phase:
        pass
    assert phase.verdict == "unguarded" and phase.before_cores is not None and phase.after_cores is not None
    row = next(s for s in drain() if s["kind"] == "quiet")
    assert row["verdict"] == "unguarded" and row["limit_setting"] == "off" and row["cpu_s"] is not None


def _hold(lock_dir: Path, exclusive: bool, name: str, until: Path | None) -> None:
    """A session process: takes the machine's turn, notes it, holds it until ``until`` exists."""
    with machine_turn(lock_dir, exclusive=exclusive):
        with (lock_dir / "order").open("a") as f:
            f.write(name + "\n")
        (lock_dir / f"{name}.holds").touch()
        while until is not None and not until.exists():
            time.sleep(0.01)


def _gate_closed(lock_dir: Path) -> bool:
    with (lock_dir / "machine-gate.lock").open("a") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False


def _wait(pred: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 120
    while not pred():
        assert time.monotonic() < deadline, "timed out waiting for a session process"
        time.sleep(0.01)


def test_a_waiting_exclusive_turn_is_not_starved_by_later_shared_ones(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    release = tmp_path / "release"
    a = ctx.Process(target=_hold, args=(tmp_path, False, "a", release))
    a.start()
    _wait((tmp_path / "a.holds").exists)
    b = ctx.Process(target=_hold, args=(tmp_path, True, "b", None))
    b.start()
    _wait(lambda: _gate_closed(tmp_path))  # b waits for the turn, its gate closed
    c = ctx.Process(target=_hold, args=(tmp_path, False, "c", None))
    c.start()
    c.join(0.5)
    assert c.is_alive() and not (tmp_path / "c.holds").exists(), "a shared turn went before a waiting exclusive one"
    release.touch()
    for proc in (a, b, c):
        proc.join(120)
        assert proc.exitcode == 0
    assert (tmp_path / "order").read_text().split() == ["a", "b", "c"]


def test_an_exclusive_turn_inside_a_shared_one_of_the_same_process_converts_it(tmp_path: Path) -> None:
    with machine_turn(tmp_path, exclusive=False):
        with machine_turn(tmp_path, exclusive=True):  # a fixture's quiet phase inside its shared setup
            other = multiprocessing.get_context("spawn").Process(target=_hold, args=(tmp_path, False, "other", None))
            other.start()
            other.join(0.5)
            assert other.is_alive(), "another process got a shared turn while this one held it alone"
        _wait((tmp_path / "other.holds").exists)  # back to shared: the other process shares it
    other.join(120)
    assert other.exitcode == 0


def test_the_timeline_lists_the_quiet_phases_and_the_utilisation_outside_them() -> None:
    quiet = {
        "kind": "quiet", "name": "perf overhead", "check": "perf.overhead.e2e_bound", "phase": "setup",
        "worker": "gw0", "start": 110.0, "end": 130.0, "limit_cores": 0.5, "limit_setting": "auto",
        "before_cores": 0.02, "after_cores": 0.04, "waited_s": 0.0, "cpu_s": 30.0, "verdict": "quiet", "reason": "",
    }  # fmt: skip
    check = {
        "kind": "check", "name": "protocol.x", "phase": "call", "check": "protocol.x", "scope": None, "worker": "gw1",
        "pid": 1, "engine": "session", "start": 100.0, "end": 101.0, "duration_s": 1.0,
    }  # fmt: skip
    cpu = CpuUsageV1(cores=2, user_s=150.0, system_s=10.0, utilisation=0.8)
    timeline = build_timeline(100.0, 200.0, [check, quiet], cpu)
    assert [q.name for q in timeline.quiet] == ["perf overhead"] and timeline.quiet[0].check == "perf.overhead.e2e_bound"
    assert [s.name for s in timeline.spans] == ["protocol.x"]
    assert timeline.cpu_outside_quiet == round((160.0 - 30.0) / (80.0 * 2), 4)
