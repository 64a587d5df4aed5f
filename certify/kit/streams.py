"""Streams a check holds open and closes itself: when the client goes away, what the engine does.

:class:`RawStream` is one HTTP/1.1 POST on a plain socket (so a check closes it mid-stream and sees whether
the chunked body ended cleanly); :func:`hold_stream` keeps a chat stream generating; :func:`close_held_stream`
closes one as a client that goes away would and measures (:func:`slot_freed_ms`) until the engine had a free
slot again; :func:`client_gone` does that on a run of its own and hands over the request's evidence row.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from certify.kit.probes import engine_load, evidence_rows, session_lock, wait_until
from certify.kit.requests import chat_body
from certify.session import CertifyEnv, RunHandle

__all__ = ["ClientGone", "RawStream", "client_gone", "close_held_stream", "hold_stream", "slot_freed_ms"]


def slot_freed_ms(engine_url: str, headers: dict[str, str], model: str, t_close: float, max_running: int) -> float:
    """Milliseconds from ``t_close`` until the engine has a free slot again.

    With one running slot (the baseline lock) a one-token request sent straight to the engine is the proof:
    it can only be answered once the cancelled request has left the engine (a request that kept running
    would hold the slot for its whole remaining budget). With more slots, ``/v1/loads`` must drop to 0
    (SGLang's load snapshot can lag; the fake's is exact)."""
    if max_running == 1:
        body = chat_body(model, stream=False, max_tokens=1)
        r = httpx.post(engine_url + "/v1/chat/completions", json=body, headers=headers, timeout=120)
        assert r.status_code == 200, r.text[:300]
    else:
        wait_until(lambda: engine_load(engine_url, headers) == 0, 60.0, interval_s=0.005, what="the engine slot freed")
    return (time.monotonic() - t_close) * 1000


def close_held_stream(env: CertifyEnv, run: RunHandle) -> tuple[int, float]:
    """Hold a stream of ``run`` in flight (on the fake engine a mid-stream stall keeps it open), close it as a
    client that goes away would, and return (engine requests running just before the close, ms until the
    engine had a free slot again)."""
    if env.fake is not None:
        env.fake.reset()
        env.fake.faults("stall_mid_stream:t=30,after=2")
    stream = hold_stream(run)
    busy = engine_load(env.engine_url, env.engine_headers())
    stream.close()
    t_close = time.monotonic()
    if env.fake is not None:
        env.fake.faults()
    max_running = session_lock(env).execution.max_running_requests
    return busy, slot_freed_ms(env.engine_url, env.engine_headers(), run.wire_model, t_close, max_running)


@dataclass(frozen=True)
class ClientGone:
    """A stream its client closed mid-way (:func:`client_gone`)."""

    run: RunHandle
    busy: int  # engine requests running just before the close
    freed_ms: float  # from the close until the engine had a free slot again
    row: dict[str, Any]  # the request's evidence row


@contextlib.contextmanager
def client_gone(env: CertifyEnv) -> Iterator[ClientGone]:
    """On a run of its own, a stream held in flight and closed by its client (:func:`close_held_stream`), with
    its evidence row; the run is deleted (and the fake engine reset) once the check has looked."""
    run = env.new_run()
    try:
        busy, freed_ms = close_held_stream(env, run)
        rows = evidence_rows(env.root.gateway_dir, run.binding_id)
        yield ClientGone(run, busy, freed_ms, rows[-1])
    finally:
        if env.fake is not None:
            env.fake.reset()
        env.delete_run(run)


class RawStream:
    """One POST on a plain socket (HTTP/1.1, chunked answer), so a check controls when the client goes away."""

    def __init__(self, base_url: str, token: str, route: str, body: dict[str, Any], timeout_s: float = 60.0) -> None:
        parts = urlsplit(base_url)
        data = json.dumps(body).encode()
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", int(parts.port or 80)), timeout=timeout_s)
        head = (
            f"POST {parts.path}{route} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        )
        self.sock.sendall(head.encode() + data)
        self.raw = b""
        self.eof = False

    def read_events(self, n: int) -> bytes:
        """Read until ``n`` SSE ``data:`` lines arrived (or the server closed)."""
        while self.raw.count(b"data: ") < n and not self.eof:
            chunk = self.sock.recv(65536)
            if not chunk:
                self.eof = True
            self.raw += chunk
        return self.raw

    def read_all(self) -> bytes:
        while not self.eof:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.eof = True
            self.raw += chunk
        return self.raw

    @property
    def status(self) -> int:
        line = self.raw.split(b"\r\n", 1)[0].split()
        return int(line[1]) if len(line) > 1 else 0

    @property
    def clean_end(self) -> bool:
        """Did the chunked body end with its terminator (a clean end, as opposed to a broken stream)?"""
        return self.raw.endswith(b"\r\n0\r\n\r\n")

    @property
    def done_seen(self) -> bool:
        return b"data: [DONE]" in self.raw or b"response.completed" in self.raw or b"response.incomplete" in self.raw

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def hold_stream(run: RunHandle, events: int = 2, tries: int = 3) -> RawStream:
    """A chat stream through ``run`` that is still generating after ``events`` events (the lock's whole
    output budget; on the fake engine the caller sets a stall first). Fails the check if every try ended."""
    for _ in range(tries):
        body = chat_body(run.wire_model, stream=True, max_tokens=None, content="Tell a long story.")
        stream = RawStream(run.base_url, run.token, "/chat/completions", body)
        stream.read_events(events)
        if stream.status == 200 and not stream.done_seen and not stream.eof:
            return stream
        stream.close()
    raise AssertionError("could not hold a stream in flight (every answer ended at once)")
