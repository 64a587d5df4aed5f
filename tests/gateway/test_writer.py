"""The gateway's file writer: 0600 files in 0700 directories, bytes built lazily, a vanished directory remade."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

from gateway.writer import WriteItem, write_private


def test_lazy_data_is_written_and_a_removed_directory_is_made_again(tmp_path: Path) -> None:
    path = tmp_path / "evidence" / "rows.jsonl"
    write_private(WriteItem(path, lambda: b"one\n"))
    shutil.rmtree(path.parent)
    write_private(WriteItem(path, b"two\n"))
    assert path.read_bytes() == b"two\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
