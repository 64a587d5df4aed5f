"""How a wait's phases read on stderr: one line per change on a pipe, JSON lines under ``--json``, nothing when
nothing waited (answers of ``GET /v1/progress`` as the daemon gives them; the daemon side is tested end to end in
tests/harness/daemon/test_first_answer.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from harness.app.progress import PhaseShower, describe
from harness.engine.log_phase import engine_log_phase

_QUEUED = {
    "phase": "queued",
    "service_id": "svc-b",
    "stage": "probe",
    "waiting_for": "resources",
    "behind": [{"holder": "svc-a#1", "service_id": "svc-a", "state": "idle", "owners": []}],
}
_START = {"phase": "starting", "service_id": "svc-b", "stage": "probe", "elapsed_s": 12.4, "step": "loading weights"}


def test_a_pipe_gets_one_line_per_change_and_the_log_path_once(tmp_path: Path) -> None:
    out = io.StringIO()
    shower = PhaseShower(out, as_json=False)
    log = str(tmp_path / "engine.log")
    for state in (_QUEUED, _QUEUED, {**_START, "engine_log": log}, {**_START, "elapsed_s": 13.0, "engine_log": log}):
        shower.show(state)
    shower.show({"phase": "ready", "service_id": "svc-b", "epoch": 1})
    lines = out.getvalue().splitlines()
    assert lines == [
        "queued: the probe start of a new lock waits for CPU/RAM held by svc-a (idle)",
        "starting the probe start of a new lock: 12 s, loading weights",
        f"engine log: {log}",
        "ready: service svc-b epoch 1",
    ]


def test_json_lines_name_the_phase_events_and_a_warm_service_says_nothing() -> None:
    out = io.StringIO()
    shower = PhaseShower(out, as_json=True)
    shower.show({"phase": None})
    shower.show({"phase": "ready", "service_id": "svc-b", "epoch": 1})  # nothing waited
    assert out.getvalue() == ""
    shower.show(_QUEUED)
    shower.show(_START)
    shower.show({**_START, "stage": None, "step": "probing"})
    shower.show({"phase": "ready", "service_id": "svc-b", "epoch": 1})
    events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
    assert events == ["inference.queued", "inference.preparing", "inference.starting", "inference.ready"]


def test_the_engine_log_tail_gives_the_step_of_this_epoch_only_and_no_secret(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    key = "k" * 32
    log.write_text(
        "==== hitch: svc epoch 1 starting at X ====\nLoad weight begin\nThe server is fired up and ready to roll!\n"
        "==== hitch: svc epoch 2 starting at Y ====\n"
        f"server_args={{'api_key': '{key}'}}\nLoad weight begin. avail mem=20 GB\n"
    )
    got = engine_log_phase(log)
    assert got["step"] == "loading weights" and got["last_log_line"] == "Load weight begin. avail mem=20 GB"
    log.write_text(log.read_text() + f"--api-key {key}\n")
    assert key not in str(engine_log_phase(log))
    assert engine_log_phase(None) == {"step": "launching", "last_log_line": None}
    assert describe({**_START, "last_log_line": "x"}).endswith("| x")
