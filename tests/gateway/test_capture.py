"""Capture never changes routing: truncation and write failures only mark the run's capture. ``metadata`` is the
evidence row's digests (no file per request); ``full`` appends to a bounded number of segment files with an index
written as it goes, whose digests the gateway knows without reading them back."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.capture import CaptureLedger, CaptureMode, RequestCapture
from gateway.capture_segments import INDEX_NAME, CaptureSegments, read_captures
from gateway.server import GatewayConfig
from gateway.writer import BackgroundWriter
from harness.run_ref import file_digest
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, target_for, token_of


def _publish(
    directory: Path, mode: CaptureMode, limit: int, request: bytes, response: bytes | None = None, segment_bytes: int = 1 << 20
) -> tuple[CaptureLedger, CaptureSegments, RequestCapture]:
    """One exchange captured with ``mode`` and ``limit`` and published under ``directory``."""
    cap = RequestCapture(mode, limit)
    cap.request(request)
    if response is not None:
        cap.response(response)
    ledger = CaptureLedger()
    writer = BackgroundWriter(16)
    segments = CaptureSegments(directory / "b1", segment_bytes)
    cap.publish(writer, ledger, segments, "b1", {"request_id": "r1", "run_id": "run"})
    assert writer.flush()
    writer.close()
    return ledger, segments, cap


def test_full_capture_is_private_complete_and_indexed(tmp_path: Path) -> None:
    ledger, segments, cap = _publish(tmp_path / "cap", "full", 1024, b'{"a":1}', b"data: x\n\n")
    assert ledger.state("b1") == "complete"
    files = sorted((tmp_path / "cap" / "b1").iterdir())
    assert [f.name for f in files] == [INDEX_NAME, "segment-00000.bin"]
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    [(record, request, response)] = list(read_captures(tmp_path / "cap" / "b1"))
    assert (request, response) == (b'{"a":1}', b"data: x\n\n")
    assert record["request_id"] == "r1" and record["capture_truncated"] is False and record["response_bytes"] == 9
    assert record["response_sha256"] == "sha256:" + hashlib.sha256(b"data: x\n\n").hexdigest() == cap.fields()["response_sha256"]
    # the digests the gateway kept as it wrote are the files' own
    assert segments.files() == [(f.name, *reversed(file_digest(f))) for f in files]


def test_truncation_marks_partial(tmp_path: Path) -> None:
    ledger, _, cap = _publish(tmp_path / "cap", "full", 4, b"{}", b"0123456789")
    assert ledger.state("b1") == "partial"
    [(record, _, response)] = list(read_captures(tmp_path / "cap" / "b1"))
    assert response == b"0123" and record["capture_truncated"] is True
    assert cap.fields()["response_bytes"] == 10  # what was relayed, not what was kept


def test_metadata_capture_writes_no_file(tmp_path: Path) -> None:
    ledger, segments, cap = _publish(tmp_path / "cap", "metadata", 1024, b"{}", b"abc")
    assert ledger.state("b1") == "complete" and not (tmp_path / "cap").exists() and segments.files() == []
    assert cap.fields() == {
        "request_sha256": "sha256:" + hashlib.sha256(b"{}").hexdigest(),
        "response_sha256": "sha256:" + hashlib.sha256(b"abc").hexdigest(),
        "response_bytes": 3,
        "capture_truncated": False,
    }


def test_write_failure_marks_failed(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    ledger, _, _ = _publish(blocker, "full", 1024, b"{}")
    assert ledger.state("b1") == "failed"


def test_segments_rotate_by_size_and_stay_few(tmp_path: Path) -> None:
    segments = CaptureSegments(tmp_path / "b1", segment_bytes=1000)
    for i in range(200):
        segments.append({"request_id": f"r{i}"}, b"q" * 40, b"a" * 60)  # 100 bytes each: 10 per segment
    names = [name for name, _, _ in segments.files()]
    assert names == [INDEX_NAME, *(f"segment-{n:05d}.bin" for n in range(20))]
    assert sorted(p.name for p in (tmp_path / "b1").iterdir()) == names
    got = list(read_captures(tmp_path / "b1"))
    assert [r["request_id"] for r, _, _ in got] == [f"r{i}" for i in range(200)]
    assert all(q == b"q" * 40 and a == b"a" * 60 for _, q, a in got)
    big = CaptureSegments(tmp_path / "b2", segment_bytes=10)
    big.append({"request_id": "huge"}, b"x" * 50, b"")  # larger than a segment: one of its own
    big.append({"request_id": "next"}, b"y", b"")
    assert [n for n, _, _ in big.files()] == [INDEX_NAME, "segment-00000.bin", "segment-00001.bin"]


def test_the_per_request_layout_of_older_runs_is_still_read(tmp_path: Path) -> None:
    folder = tmp_path / "b-old"
    folder.mkdir()
    (folder / "r1.meta.json").write_text(json.dumps({"request_id": "r1", "mode": "full"}))
    (folder / "r1.request.json").write_bytes(b'{"q":1}')
    (folder / "r1.response.bin").write_bytes(b"answer")
    assert list(read_captures(folder)) == [({"request_id": "r1", "mode": "full"}, b'{"q":1}', b"answer")]


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["metadata", "full"])
def test_a_gateways_capture_grows_no_file_per_request(engine: Engine, tmp_path: Path, mode: Any) -> None:
    with GatewayThread(GatewayConfig(state_dir=tmp_path / "gw", capture=mode, capture_segment_bytes=4096)) as gt:
        rec = gt.register("run-cap", target_for(engine, make_lock(context=4096)))
        chat = {"model": "tiny-wire", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
        with httpx.Client(headers={"Authorization": f"Bearer {token_of(rec)}"}, timeout=60) as client:
            for i in range(30):
                r = client.post(rec.base_url + "/chat/completions", json={**chat, "stream": i % 2 == 1})
                assert r.status_code == 200, r.text
        rows = evidence_rows(gt, rec.binding_id)
        folder = tmp_path / "gw" / "capture" / rec.binding_id
        assert len(rows) == 30 and all(r["request_sha256"] and r["response_bytes"] for r in rows)
        if mode == "metadata":
            assert not folder.exists()  # the row is the evidence
        else:
            files = sorted(p.name for p in folder.iterdir())
            assert INDEX_NAME in files and len(files) < 30
            captured = {r["request_id"]: (r, q, a) for r, q, a in read_captures(folder)}
            for row in rows:  # every row's digest is that of the bytes kept for it
                record, _, answer = captured[row["request_id"]]
                assert row["response_sha256"] == "sha256:" + hashlib.sha256(answer).hexdigest() == record["response_sha256"]
            segments = gt.gw.segments[rec.binding_id]
            assert segments.files() == [(p.name, *reversed(file_digest(p))) for p in sorted(folder.iterdir())]
