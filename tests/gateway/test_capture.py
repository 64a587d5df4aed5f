"""Capture never changes routing: truncation and write failures only mark the run's capture."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from gateway.capture import CaptureLedger, CaptureMode, RequestCapture
from gateway.writer import BackgroundWriter


def _publish(
    tmp: Path, directory: Path, mode: CaptureMode, limit: int, request: bytes, response: bytes | None = None
) -> CaptureLedger:
    """One exchange captured with ``mode`` and ``limit`` and published under ``directory``."""
    cap = RequestCapture(mode, limit)
    cap.request(request)
    if response is not None:
        cap.response(response)
    ledger = CaptureLedger()
    writer = BackgroundWriter(16)
    cap.publish(writer, ledger, directory, "b1", {"request_id": "r1", "run_id": "run"})
    assert writer.flush()
    writer.close()
    return ledger


def test_full_capture_is_private_and_complete(tmp_path: Path) -> None:
    ledger = _publish(tmp_path, tmp_path / "cap", "full", 1024, b'{"a":1}', b"data: x\n\n")
    assert ledger.state("b1") == "complete"
    files = sorted((tmp_path / "cap" / "b1").iterdir())
    assert [f.name for f in files] == ["r1.meta.json", "r1.request.json", "r1.response.bin"]
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert (tmp_path / "cap" / "b1" / "r1.response.bin").read_bytes() == b"data: x\n\n"
    meta = json.loads((tmp_path / "cap" / "b1" / "r1.meta.json").read_text())
    assert meta["truncated"] is False and meta["response_bytes"] == 9


def test_truncation_marks_partial(tmp_path: Path) -> None:
    ledger = _publish(tmp_path, tmp_path / "cap", "full", 4, b"{}", b"0123456789")
    assert ledger.state("b1") == "partial"
    assert (tmp_path / "cap" / "b1" / "r1.response.bin").read_bytes() == b"0123"


def test_write_failure_marks_failed(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    ledger = _publish(tmp_path, blocker, "metadata", 1024, b"{}")
    assert ledger.state("b1") == "failed"
