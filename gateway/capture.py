"""Payload capture: off / metadata / full, private files, never on the routing path (spec §10.2).

Owns :class:`RequestCapture` (what one request's capture holds while it runs) and :class:`CaptureLedger`
(per run: ``complete`` until a capture of that run was truncated or dropped → ``partial``, or a write
failed → ``failed``). ``off`` stores no payload (it does not mean "direct to a cloud": routing is the same
in every mode); ``metadata`` records the sizes and sha256 digests of the request sent upstream and of the
bytes returned in the request's evidence row (:meth:`RequestCapture.fields`), no file per request; ``full``
also stores those bytes, up to a per-request limit, appended to the run's segment files
(:mod:`gateway.capture_segments`). Files are 0600, written by the bounded
:class:`gateway.writer.BackgroundWriter`; a full queue or a failed write only marks the ledger.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gateway.capture_segments import CaptureSegments
from gateway.writer import BackgroundWriter, WriteJob

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

    @property
    def mode(self) -> CaptureMode:
        return self._mode

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

    def fields(self) -> dict[str, Any]:
        """The evidence row's capture fields (the whole per-request evidence at ``metadata``)."""
        return {
            "request_sha256": "sha256:" + self._req_hash.hexdigest(),
            "response_sha256": "sha256:" + self._resp_hash.hexdigest(),
            "response_bytes": self._sent,
            "capture_truncated": self.truncated,
        }

    def publish(
        self,
        writer: BackgroundWriter,
        ledger: CaptureLedger,
        segments: CaptureSegments | None,
        binding_id: str,
        meta: dict[str, Any],
    ) -> None:
        """At ``full``, queue the payloads for the run's segments; truncation or a full queue marks the run's
        capture partial, a failed write marks it failed."""
        if self.truncated:
            ledger.mark(binding_id, "partial")
        if self._mode != "full" or segments is None:
            return

        def failed(_: OSError) -> None:
            ledger.mark(binding_id, "failed")

        record = {**meta, **self.fields(), "mode": self._mode}
        job = WriteJob(functools.partial(segments.append, record, self.request_body, b"".join(self._chunks)), failed)
        if not writer.submit(job):
            ledger.mark(binding_id, "partial")
