"""Payload capture: off / metadata / full, private files, never on the routing path (spec §10.2).

Owns :class:`RequestCapture` (what one request's capture holds while it runs) and :class:`CaptureLedger`
(per run: ``complete`` until a capture of that run was truncated or dropped → ``partial``, or a write
failed → ``failed``). ``off`` stores no payload (it does not mean "direct to a cloud": routing is the same
in every mode); ``metadata`` stores sizes and sha256 digests of the request sent upstream and of the bytes
returned; ``full`` also stores those bytes, up to a per-request limit. Files are 0600, written by the
bounded :class:`gateway.writer.BackgroundWriter`; a full queue or a failed write only marks the ledger.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gateway.writer import BackgroundWriter, WriteItem

__all__ = ["CaptureLedger", "CaptureMode", "RequestCapture", "RunCapture"]

CaptureMode = Literal["off", "metadata", "full"]
CaptureState = Literal["complete", "partial", "failed"]
_RANK = {"complete": 0, "partial": 1, "failed": 2}


@dataclass(frozen=True)
class RunCapture:
    """One run's own capture (``hitch run --capture``): its mode, its folder (under the run) and its bound."""

    mode: CaptureMode
    directory: Path
    limit_bytes: int | None = None  # None: the gateway's


class CaptureLedger:
    """The capture state of each run (by binding id); the worst state seen wins."""

    def __init__(self) -> None:
        self._state: dict[str, CaptureState] = {}

    def mark(self, binding_id: str, state: CaptureState) -> None:
        if _RANK[state] > _RANK[self._state.get(binding_id, "complete")]:
            self._state[binding_id] = state

    def state(self, binding_id: str) -> CaptureState:
        return self._state.get(binding_id, "complete")


class RequestCapture:
    """One request's capture; feed it the upstream body and the response bytes as they pass."""

    __slots__ = ("_chunks", "_kept", "_limit", "_mode", "_req_hash", "_resp_hash", "_sent", "request_body", "truncated")

    def __init__(self, mode: CaptureMode, limit_bytes: int) -> None:
        self._mode = mode
        self._limit = limit_bytes
        self._chunks: list[bytes] = []
        self._kept = 0
        self._sent = 0
        self._req_hash = hashlib.sha256()
        self._resp_hash = hashlib.sha256()
        self.request_body = b""
        self.truncated = False

    def request(self, body: bytes) -> None:
        self._req_hash.update(body)
        if self._mode == "full":
            if len(body) > self._limit:
                self.truncated = True
                body = body[: self._limit]
            self.request_body = body

    def response(self, chunk: bytes) -> None:
        self._sent += len(chunk)
        self._resp_hash.update(chunk)
        if self._mode == "full" and not self.truncated:
            room = self._limit - self._kept
            if len(chunk) > room:
                chunk = chunk[:room]
                self.truncated = True
            self._chunks.append(chunk)
            self._kept += len(chunk)

    def publish(
        self, writer: BackgroundWriter, ledger: CaptureLedger, directory: Path, binding_id: str, meta: dict[str, Any]
    ) -> None:
        """Queue the capture files; truncation or a full queue marks the run's capture partial."""

        def failed(_: OSError) -> None:
            ledger.mark(binding_id, "failed")

        state: CaptureState = "partial" if self.truncated else "complete"
        record = {
            **meta,
            "mode": self._mode,
            "request_sha256": "sha256:" + self._req_hash.hexdigest(),
            "response_sha256": "sha256:" + self._resp_hash.hexdigest(),
            "response_bytes": self._sent,
            "truncated": self.truncated,
        }
        base = directory / binding_id / str(meta["request_id"])
        items = [WriteItem(base.with_suffix(".meta.json"), json.dumps(record, sort_keys=True).encode(), False, failed)]
        if self._mode == "full":
            items.append(WriteItem(base.with_suffix(".request.json"), self.request_body, False, failed))
            items.append(WriteItem(base.with_suffix(".response.bin"), b"".join(self._chunks), False, failed))
        for item in items:
            if not writer.submit(item):
                state = "partial"
        if state != "complete":
            ledger.mark(binding_id, state)
