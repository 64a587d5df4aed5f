"""certify.timeline: spans kept per process until drained, the CPU over a session, the timeline record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from certify.timeline import CpuSample, build_timeline, cpu_sample, cpu_usage, drain, record, span

STAT = "cpu  {user} {nice} {system} 9000 10 0 5 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\nintr 1\n"


def test_spans_are_kept_until_drained_and_a_failing_step_is_still_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    drain()
    with span("engine start", engine="session"):
        pass
    with pytest.raises(RuntimeError), span("private daemon start", engine="private"):
        raise RuntimeError("boom")
    held = record("check", "x.y", 10.0, 12.5, keep=False)
    got = drain()
    assert [(s["kind"], s["name"], s["engine"], s["worker"], s["pid"]) for s in got] == [
        ("step", "engine start", "session", "gw3", os.getpid()),
        ("step", "private daemon start", "private", "gw3", os.getpid()),
    ]
    assert all(s["start"] <= s["end"] and s["duration_s"] == round(s["end"] - s["start"], 6) for s in got)
    assert held["duration_s"] == 2.5 and drain() == []


def test_cpu_usage_is_user_and_system_time_over_wall_time_times_cores(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT.format(user=1000, nice=0, system=500))
    first = cpu_sample(stat)
    assert first is not None and first.cores == 2
    ticks = os.sysconf("SC_CLK_TCK")
    assert first.user_s == 1000 / ticks and first.system_s == 500 / ticks
    before = CpuSample(at=100.0, user_s=10.0, system_s=5.0, cores=2)
    after = CpuSample(at=110.0, user_s=19.0, system_s=8.0, cores=2)
    usage = cpu_usage(before, after)
    assert usage is not None and (usage.user_s, usage.system_s, usage.utilisation) == (9.0, 3.0, 0.6)
    assert cpu_usage(before, None) is None and cpu_usage(after, before) is None


def test_an_unreadable_proc_stat_gives_no_cpu_figure(tmp_path: Path) -> None:
    assert cpu_sample(tmp_path / "absent") is None
    (tmp_path / "odd").write_text("not a stat file\n")
    assert cpu_sample(tmp_path / "odd") is None


def test_the_timeline_record_sorts_spans_and_refuses_one_that_ends_before_it_starts() -> None:
    late = record("check", "x.late", 20.0, 30.0, worker="gw1", keep=False)
    early = record("fixture", "certify_env", 5.0, 19.0, phase="setup", scope="session", worker="gw0", keep=False)
    timeline = build_timeline(1.0, 31.0, [late, early], None)
    assert [s.name for s in timeline.spans] == ["certify_env", "x.late"]
    assert timeline.wall_s == 30.0 and timeline.cpu is None
    with pytest.raises(ValidationError):
        build_timeline(1.0, 31.0, [{**late, "end": 19.0}], None)
