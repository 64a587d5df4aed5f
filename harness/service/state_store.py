"""The on-disk record of one service: ``state.json`` and ``events.jsonl`` (spec §6.4, §9.3, §12.1).

Under ``HitchRoot.service_dir(service_id)``:

- ``state.json``: the current :class:`InferenceServiceRecordV1`, replaced atomically (temp + fsync + rename),
  so a reader — or a daemon restarting after a crash — sees the previous record or the new one, never half;
- ``events.jsonl``: one :class:`LifecycleEventV1` per line, appended and fsynced, never rewritten.

Both files are 0600 and hold identities and references only, never a key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.contracts.base import parse_record
from harness.contracts.events import LifecycleEventV1
from harness.contracts.service import InferenceServiceRecordV1
from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_bytes

__all__ = ["EVENTS_FILE", "STATE_FILE", "ServiceStateStore"]

STATE_FILE = "state.json"
EVENTS_FILE = "events.jsonl"


class ServiceStateStore:
    """Reads and writes one service's ``state.json`` and ``events.jsonl``."""

    def __init__(self, root: HitchRoot, service_id: str) -> None:
        self.service_id = service_id
        self.dir = root.service_dir(service_id)

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    @property
    def events_path(self) -> Path:
        return self.dir / EVENTS_FILE

    def read(self) -> InferenceServiceRecordV1 | None:
        """The last written record, or ``None`` for a service that never started."""
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise HitchError("internal_error", f"{self.state_path} is not JSON", {"path": str(self.state_path)}) from exc
        return parse_record(InferenceServiceRecordV1, data, "internal_error")

    def write(self, record: InferenceServiceRecordV1) -> None:
        body = json.dumps(record.to_json_dict(), indent=2, sort_keys=True) + "\n"
        atomic_write_bytes(self.state_path, body.encode(), mode=0o600)

    def append_event(self, event: LifecycleEventV1) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        line = json.dumps(event.to_json_dict(), sort_keys=True, separators=(",", ":")) + "\n"
        fd = os.open(self.events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def events(self) -> list[LifecycleEventV1]:
        """Every event in append order (a torn last line after a crash is skipped)."""
        try:
            lines = self.events_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out: list[LifecycleEventV1] = []
        for line in lines:
            try:
                data = json.loads(line)
            except ValueError:
                continue
            out.append(parse_record(LifecycleEventV1, data, "internal_error"))
        return out
