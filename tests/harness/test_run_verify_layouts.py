"""``hitch run verify`` over both capture layouts: the per-request files of runs written before segments (one
``*.meta.json`` / ``*.request.json`` / ``*.response.bin`` per request, hashed at the run's end) and the segment
files whose digests the gateway kept as it wrote them. Each verifies as sealed; a changed, missing or extra
capture file is named."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gateway.capture_segments import CaptureSegments
from harness.contracts.run import RunRecordV1, RunTransitionV1
from harness.contracts.run_ref import CaptureFileV1
from harness.paths import HitchRoot
from harness.run_ref import CAPTURE_INDEX, REF_PATHS, seal_ref, verify_run, write_capture_index
from tests.gateway.support import make_lock

BINDING = "b0123456789abcdef01234567"


def _run(root: HitchRoot, run_id: str, capture_files: list[CaptureFileV1] | None) -> Path:
    """A finished run with a full capture (its folder filled by the caller before) sealed as the daemon seals it."""
    run_dir = root.runs / run_id
    lock = make_lock()
    (run_dir / "inference").mkdir(parents=True, exist_ok=True)
    for name, rel in REF_PATHS.items():
        if name != "capture_index":
            (run_dir / rel).write_text(json.dumps(lock.to_json_dict()) if name == "lock" else f"{name}\n")
    write_capture_index(run_dir, "full", capture_files)
    _, digest = seal_ref(run_dir, run_id, lock)
    now = time.time()
    record = RunRecordV1(
        run_id=run_id, status="completed", harness=None, request={}, capture="full", daemon_pid=1,
        admitted_at=now, updated_at=now, finished_at=now, history=[RunTransitionV1(status="completed", at=now)],
        ref_digest=digest,
    )  # fmt: skip
    (run_dir / "run.json").write_text(json.dumps(record.to_json_dict()))
    return run_dir


def _changes(root: HitchRoot, run_id: str) -> list[tuple[str, str]]:
    return [(c.path, c.what) for c in verify_run(root, run_id).changes]


def test_a_run_of_the_per_request_layout_still_verifies(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    folder = root.runs / "old" / "inference" / "capture" / BINDING
    folder.mkdir(parents=True)
    for rid in ("r1", "r2"):
        (folder / f"{rid}.meta.json").write_text(json.dumps({"request_id": rid, "mode": "full"}))
        (folder / f"{rid}.request.json").write_text('{"input": "hello"}')
        (folder / f"{rid}.response.bin").write_bytes(b"data: x\n\n")
    run_dir = _run(root, "old", None)  # hashed file by file at the end, as the daemon did then
    index = json.loads((run_dir / "inference" / CAPTURE_INDEX).read_text())
    assert len(index["files"]) == 6
    result = verify_run(root, "old")
    assert result.ok and len([p for p in result.checked if "/capture/" in p]) == 6
    (folder / "r2.response.bin").write_bytes(b"data: y\n\n")
    assert _changes(root, "old") == [(f"inference/capture/{BINDING}/r2.response.bin", "changed")]


def test_a_run_of_segments_verifies_with_the_digests_kept_while_writing(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    folder = root.runs / "new" / "inference" / "capture" / BINDING
    segments = CaptureSegments(folder, segment_bytes=256)
    for i in range(40):
        segments.append({"request_id": f"r{i}"}, b'{"input": "hello"}', b"data: x\n\n" * 3)
    known = [CaptureFileV1(path=f"{BINDING}/{n}", size=size, digest=d) for n, size, d in segments.files()]
    assert 3 < len(known) < 40  # a few segments and the index, never a file per request
    _run(root, "new", known)
    assert verify_run(root, "new").ok
    (folder / "segment-00001.bin").write_bytes(b"other")
    (folder / "stray.bin").write_bytes(b"x")
    assert _changes(root, "new") == [
        (f"inference/capture/{BINDING}/segment-00001.bin", "changed"),
        (f"inference/capture/{BINDING}/stray.bin", "extra"),
    ]
