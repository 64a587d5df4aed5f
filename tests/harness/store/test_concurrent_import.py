"""Two processes import the same directory at once: one object, both succeed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.paths import HitchRoot
from harness.store import list_model_ids, read_aliases

# Each process copies its first file, announces it, then waits for the other: both are
# past staging before either publishes, so one publishes and the other finds the object.
_SCRIPT = r"""
import json, sys, time
from pathlib import Path
from harness.paths import HitchRoot
from harness.store import import_model

root, src, alias, sync, me = sys.argv[1:6]
def barrier(rel):
    Path(sync, me).touch()
    deadline = time.monotonic() + 60
    while len(list(Path(sync).iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
first = True
def hook(rel):
    global first
    if first:
        first = False
        barrier(rel)
r = import_model(HitchRoot(Path(root)), Path(src), alias, on_file_copied=hook)
print(json.dumps({"model_id": r.model_id, "already_present": r.already_present}))
"""


def test_two_processes_one_object(tmp_path: Path, checkpoint: Path, hroot: HitchRoot) -> None:
    sync = tmp_path / "sync"
    sync.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, str(hroot.path), str(checkpoint), alias, str(sync), alias],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for alias in ("one", "two")
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    results = [json.loads(out) for out, _ in outputs]
    assert results[0]["model_id"] == results[1]["model_id"]
    assert sorted(r["already_present"] for r in results) == [False, True]
    model_id = results[0]["model_id"]
    assert list_model_ids(hroot) == [model_id]
    assert [p.name for p in hroot.model_files.iterdir()] == [model_id.split(":")[1]]
    assert read_aliases(hroot) == {"one": model_id, "two": model_id}
    assert list(hroot.staging.iterdir()) == []
