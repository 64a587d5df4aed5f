"""The run page's timeline: the critical-path rule on synthetic spans, and the section as the page renders it."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from harness.contracts.timeline import CertificationTimelineV1, TimelineSpanV1
from harness.errors import HitchError
from reports.builder import build_run_page
from reports.timeline import critical_path, timeline_section, timeline_summary
from tests.reports import sample_data as sd

T0 = sd.TIMELINE_T0
_span, _timeline, _spans = sd.timeline_span, sd.timeline, sd.timeline_spans


def _parse(spans: list[dict[str, Any]]) -> list[TimelineSpanV1]:
    return [TimelineSpanV1.model_validate(s) for s in spans]


def test_the_critical_path_follows_what_each_span_waited_on_across_processes() -> None:
    path = critical_path(_parse(_spans()), T0)
    assert [(p.span.worker, p.span.name) for p in path] == [
        ("gw0", "certify_env"),  # the session engine start inside it is part of it, not a span of its own
        ("gw0", "hardware.a"),  # gw1's engine turn waited on gw0's exclusive check
        ("gw1", "_shared_engine_turn"),
        ("gw1", "protocol.b"),
        ("main", "security.secrets.scan"),  # the controller's session-end check waited on the last worker
    ]
    assert [round(p.gap_s, 6) for p in path] == [2.0, 0.0, 0.0, 0.0, 1.0]
    assert round(path[2].own_s, 6) == 0.5  # the wait's own share: from the check that released it to its end
    for before, after in itertools.pairwise(path):
        assert before.span.end <= (after.span.end if after.span.kind == "wait" else after.span.start)


def test_ties_prefer_the_same_process_and_an_empty_timeline_has_no_path() -> None:
    spans = [
        _span("check", "x.one", 0, 10, "gw0"),
        _span("check", "x.two", 0, 10, "gw1"),
        _span("check", "x.three", 10, 12, "gw1"),
    ]
    assert [p.span.name for p in critical_path(_parse(spans), T0)] == ["x.two", "x.three"]
    assert critical_path([], T0) == []


def test_a_span_inside_another_of_the_same_process_is_never_on_the_path_but_one_of_another_process_is() -> None:
    spans = [
        _span("fixture", "outer", 0, 10, "gw0", phase="setup"),
        _span("step", "inner", 1, 9, "gw0", phase="setup"),
        _span("check", "x.late", 9.5, 11, "gw1"),
    ]
    names = [p.span.name for p in critical_path(_parse(spans), T0)]
    assert names == ["x.late"]  # nothing ended before gw1's check started: it is the whole chain
    assert "inner" not in [p.span.name for p in critical_path(_parse(spans[:2]), T0)]


def test_the_run_page_draws_one_lane_per_process_and_lists_the_critical_path(tmp_path: Path) -> None:
    cpu = {"cores": 2, "user_s": 100.0, "system_s": 20.0, "utilisation": 0.4286}
    timeline = _timeline(_spans(), cpu=cpu)
    html = build_run_page({**sd.predicate(), "timeline": timeline}, tmp_path).read_text()
    chart = re.search(r'<svg class="chart" data-chart="session-timeline" data-unit="s"[^>]*>.*?</svg>', html, re.S)
    assert chart is not None
    svg = chart.group(0)
    assert 'aria-label="Session timeline (s)"' in svg
    desc = re.search(r"<desc>(.*?)</desc>", svg, re.S)
    assert desc is not None and desc.group(1).startswith("Session timeline. gw0: 2 checks")
    rects = re.findall(r'<rect class="span" data-lane="([^"]+)" data-row="([^"]+)" data-series="([^"]+)"', svg)
    assert len(rects) == len(_spans())  # every span drawn, the inner step too (thinner, on its fixture)
    assert [lane for lane, _, _ in rects[:1]] == ["gw0"]
    assert {lane for lane, _, _ in rects} == {"gw0", "gw1", "main"}
    assert ("gw0", "checks", "private") in rects and ("gw1", "fixtures", "unattributed") in rects
    assert 'viewBox="0 0 760 ' in svg  # one width that the page's 800 px layout scales, never overflows
    rows = re.findall(r'<tr class="path-row" data-kind="(\w+)">(.*?)</tr>', html, re.S)
    assert [kind for kind, _ in rows] == ["fixture", "check", "wait", "check", "check"]
    assert "protocol.b" in rows[3][1] and "59.5 s" in rows[3][1]
    assert 'class="lane-row" data-lane="gw0"' in html and 'data-lane="main"' in html
    assert "43 % of 2 cores" in html


def test_a_session_without_a_timeline_says_so_and_a_malformed_one_is_refused(tmp_path: Path) -> None:
    html = build_run_page(sd.predicate(), tmp_path).read_text()
    assert 'id="timeline-missing"' in html and "session-timeline" not in html
    backwards = _spans()
    backwards[3] = {**backwards[3], "end": backwards[3]["start"] - 1, "duration_s": -1}
    for bad in (_timeline(backwards), {**_timeline(_spans()), "extra": 1}, "not a timeline"):
        with pytest.raises(HitchError) as exc:
            timeline_section({"timeline": bad})
        assert exc.value.code == "report_input_invalid"


def test_the_terminal_summary_states_the_sums_the_cpu_and_the_longest_spans_of_the_path() -> None:
    cpu = {"cores": 2, "user_s": 100.0, "system_s": 20.0, "utilisation": 0.4286}
    lines = timeline_summary(CertificationTimelineV1.model_validate(_timeline(_spans(), cpu=cpu)))
    # checks: 10 + 59.5 + 19.9 + 1; fixtures: outer spans only (the step is inside certify_env)
    assert lines[0] == "timeline: wall 140.0 s, checks 90.4 s, fixtures 145.3 s, CPU 43 % of 2 cores"
    assert lines[1].startswith("critical path: 5 spans")
    assert lines[2] == "  gw1 check protocol.b: 59.5 s"
