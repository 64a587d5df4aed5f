"""The gateway's configuration: one frozen record handed to :class:`gateway.server.Gateway`, never read from
the environment.

Owns :class:`GatewayConfig` and :data:`DEFAULT_MAX_WAITING`. For example::

    GatewayConfig(state_dir=root / "gateway", capture="metadata", max_waiting=32)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.capture import CaptureMode
from gateway.capture_segments import SEGMENT_BYTES
from gateway.connections import HttpLimits
from harness.paths import SubPath

__all__ = ["DEFAULT_MAX_WAITING", "GatewayConfig"]

# The gateway's queue bound per service (requests waiting for a permit). Waiting is already bounded in time by
# the lock's queue timeout; this bounds memory (each waiter holds its body, up to gateway.intake.body_limit:
# ~1.3 MB at an 8k context, so 64 waiters stay under ~85 MB) while holding every agent a realistic evaluation
# runs against one service at once (Harbor -n 32 with a retry in flight each). Only past it is a request 429.
DEFAULT_MAX_WAITING = 64


@dataclass(frozen=True)
class GatewayConfig:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    metrics_port: int | None = 0
    capture: CaptureMode = "off"
    capture_limit_bytes: int = 16 << 20
    capture_segment_bytes: int = SEGMENT_BYTES  # a full capture's segment files rotate past this size
    max_waiting: int = DEFAULT_MAX_WAITING  # per service; the engine's own --max-queued-requests is the second boundary
    max_body_bytes: int | None = None  # None: derived per lock from its context (gateway.intake.body_limit)
    max_response_bytes: int = 256 << 20
    queue_timeout_ms: int | None = None

    abort_confirm_timeout_ms: int | None = None  # None: the lock's (else harness.lock.ABORT_CONFIRM_TIMEOUT_MS)
    # the HTTP layer's bounds on every connection (gateway.connections): head, body, idle keep-alive, open count
    header_timeout_s: float = HttpLimits.header_timeout_s
    body_timeout_s: float = HttpLimits.body_timeout_s
    idle_timeout_s: float = HttpLimits.idle_timeout_s
    max_connections: int = HttpLimits.max_connections

    private_dir = SubPath("state_dir", "private")
    evidence_dir = SubPath("state_dir", "evidence")
    capture_dir = SubPath("state_dir", "capture")
