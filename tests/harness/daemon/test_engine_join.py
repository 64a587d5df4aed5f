"""The live engine join (``harness.daemon.engine_join``): a run's rows joined to the engine's request lines while
the run lives, so its end reads only the last stretch; what it writes is exactly the one-pass join's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from harness.daemon.engine_join import KEEP_LINES_S, EngineJoin
from harness.daemon.engine_requests import ENGINE_REQUESTS, PARTIAL, write_engine_requests
from harness.run_ref import file_digest


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _finished(rid: str, prompt: int) -> str:
    meta = {"prompt_tokens": prompt, "completion_tokens": 2, "e2e_latency": 0.5, "finish_reason": {"type": "length"}}
    record = {"event": "request.finished", "rid": rid, "out": {"meta_info": meta}}
    return f"[2026-12-03 17:00:00] {json.dumps(record)}\n"


def _row(n: int, rid: str | None, status: str) -> str:
    # the gateway's own field order first (the join's fast path), then the rest
    head = {"schema_version": "1", "request_id": f"r{n}", "engine_rid": rid}
    return json.dumps({**head, "route": "/v1/chat/completions", "status": status}, separators=(",", ":")) + "\n"


def _append(path: Path, text: str) -> None:
    with path.open("a") as handle:
        handle.write(text)


def test_the_live_join_writes_what_the_one_pass_join_writes(tmp_path: Path) -> None:
    """Rows and lines in any order across passes (a line before its row, a row before its line, another run's
    lines, a refused row with no engine id, a torn last line) give the same file, digest and counts."""
    live, once = tmp_path / "live", tmp_path / "once"
    live.mkdir()
    once.mkdir()
    rows, log = tmp_path / "rows.jsonl", tmp_path / "engine.log"
    log.write_text("server starting\n" + _finished("earlier-run", 1))
    rows.write_text("")
    join = EngineJoin(rows, log, live)
    steps = [
        ("", _finished("e1", 5)),  # the line before its row
        (_row(1, "e1", "completed") + _row(2, None, "rejected"), _finished("other-run", 9)),
        (_row(3, "e3", "completed"), ""),  # the row before its line
        ("", _finished("e3", 7) + _finished("e4", 8)[:25]),  # a torn line: read whole next pass
        (_row(4, "e4", "incomplete") + _row(5, "e5", "cancelled")[:20], _finished("e4", 8)[25:]),
        (_row(5, "e5", "cancelled")[20:] + _row(6, "e6", "completed"), _finished("e6", 4) + _finished("e5", 3)),
    ]
    for new_rows, new_lines in steps:
        _append(rows, new_rows)
        _append(log, new_lines)
        join.advance()
    assert (live / PARTIAL).exists() and not (live / ENGINE_REQUESTS).exists()
    summary = join.finish(wait_s=0.0)
    expected = write_engine_requests(once, rows, log, wait_s=0.0)
    assert (live / ENGINE_REQUESTS).read_bytes() == (once / ENGINE_REQUESTS).read_bytes()
    assert summary == expected and (summary.joined, summary.unmatched) == (5, 1)
    assert summary.digest == file_digest(live / ENGINE_REQUESTS)[0] and not (live / PARTIAL).exists()


def test_the_runs_end_reads_only_what_came_after_the_last_pass(tmp_path: Path) -> None:
    rows, log = tmp_path / "rows.jsonl", tmp_path / "engine.log"
    rows.write_text("")
    log.write_text("")
    join = EngineJoin(rows, log, tmp_path)
    for n in range(200):
        _append(log, _finished(f"e{n}", n))
        _append(rows, _row(n, f"e{n}", "completed"))
    join.advance()
    assert join.written == 200 and join.rows_offset == rows.stat().st_size and join.log_offset == log.stat().st_size
    _append(log, _finished("e200", 1))
    _append(rows, _row(200, "e200", "completed"))
    summary = join.finish(wait_s=0.0)
    assert (summary.joined, summary.unmatched) == (201, 0)
    written = (tmp_path / ENGINE_REQUESTS).read_text().splitlines()
    assert [json.loads(line)["request_id"] for line in written] == [f"r{n}" for n in range(201)]


def test_a_row_whose_line_never_comes_is_unmatched_after_the_window_and_the_rows_behind_it_follow(tmp_path: Path) -> None:
    clock = _Clock()
    rows, log = tmp_path / "rows.jsonl", tmp_path / "engine.log"
    rows.write_text(_row(1, "lost", "completed") + _row(2, "e2", "completed"))
    log.write_text("")
    join = EngineJoin(rows, log, tmp_path, window_s=10.0, clock=clock)
    _append(log, _finished("e2", 2))
    join.advance()
    assert join.written == 0  # r1 holds the order while its line may still come
    clock.now += 10.0
    join.advance()
    assert (join.written, join.matched) == (2, 1)
    written = [json.loads(line) for line in (tmp_path / PARTIAL).read_text().splitlines()]
    assert [(w["request_id"], w["joined"]) for w in written] == [("r1", False), ("r2", True)]
    join.abandon()


def test_another_runs_lines_are_not_kept_past_their_horizon(tmp_path: Path) -> None:
    clock = _Clock()
    rows, log = tmp_path / "rows.jsonl", tmp_path / "engine.log"
    rows.write_text("")
    log.write_text("")
    join = EngineJoin(rows, log, tmp_path, clock=clock)
    _append(log, "".join(_finished(f"other-{n}", n) for n in range(50)))
    join.advance()
    assert join.held_lines == 50
    clock.now += KEEP_LINES_S + 1
    join.advance()
    assert join.held_lines == 0
    join.abandon()
    assert not (tmp_path / PARTIAL).exists()


def test_the_join_advances_on_the_loop_until_stopped(tmp_path: Path) -> None:
    rows, log = tmp_path / "rows.jsonl", tmp_path / "engine.log"
    rows.write_text(_row(1, "e1", "completed"))
    log.write_text("")
    join = EngineJoin(rows, log, tmp_path)
    _append(log, _finished("e1", 1))

    async def run() -> None:
        join.start(interval_s=0.01)
        for _ in range(2000):  # up to 20 s: a pass comes within the first few ticks on any machine
            if join.written:
                break
            await asyncio.sleep(0.01)
        await join.stop()

    asyncio.run(run())
    assert join.written == 1
    assert join.finish(wait_s=0.0).joined == 1
