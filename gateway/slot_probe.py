"""Did the engine free an abandoned request's slot? (spec §9.2: no faked cancel)

When the gateway abandons a request it forwarded (the client left, a timeout, a size cap) it closes the
engine connection, which makes SGLang abort the request; the permit of that request is handed on only once
the engine *shows* the slot free. Owns:

- :func:`engine_load`: requests running or waiting in the engine, from ``GET /v1/loads`` (SGLang >= 0.5.8 and
  the fake answer alike), else SGLang's ``/metrics`` gauges (both parsed by :mod:`harness.engine.load`);
- :func:`confirm_slot_free`: polls the load until it is at most the service's other requests at the engine
  (its queue's :attr:`~gateway.admission.FairQueue.at_engine`, less this one), or the bound passes.

A figure counts as "free" only when the engine took it after the gateway let the request go: ``/v1/loads`` is
a snapshot the scheduler publishes (after a prefill, on every idle loop, every few decode steps), so one read
just after a stream's first events can still show the engine empty while it runs the request; SGLang
0.5.23 showed exactly that (a real engine that kept the slot read as free). Each rank's ``timestamp`` says when
the snapshot was taken (the engine's wall clock, the same host's); older ones are read again. ``/metrics``
states no time and is taken as it is (engines without ``/v1/loads``).

The engine is reached only through the gateway (its key is private), so any request it counts is one the
gateway sent; a request sent to the engine around the gateway (a direct probe) that stays running for the
whole bound would read as an unconfirmed abort. A request just forwarded that the engine has not registered
yet can make a leaked slot look free once; the leak stays visible to the next abort's check.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gateway.engine_http import EngineBodyEnded, EnginePool
from harness.engine.load import LOADS_PATH, METRICS_PATH, EngineLoad, load_from_loads, load_from_metrics

__all__ = ["SlotVerdict", "confirm_slot_free", "engine_load"]

_PROBE_TIMEOUT_S = 5.0
# polls start fast (an engine that honours the abort shows it within a scheduler step or two) and back off, so a
# slow engine is not also kept busy answering load probes
_FIRST_INTERVAL_S = 0.02
_MAX_INTERVAL_S = 0.5


@dataclass(frozen=True)
class SlotVerdict:
    outcome: Literal["free", "unconfirmed", "engine_gone"]
    waited_ms: float
    engine_load: int | None  # the last load read (None: never read)
    stale_reads: int = 0  # reads that showed the slot free in a snapshot taken before the request was let go


async def _get(pool: EnginePool, origin: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    resp = await pool.get(origin, path, headers, _PROBE_TIMEOUT_S)
    chunks: list[bytes] = []
    try:
        while chunk := await resp.read():
            chunks.append(chunk)
    except BaseException:
        resp.close()
        raise
    resp.release()
    return resp.status, b"".join(chunks)


async def engine_load(pool: EnginePool, origin: str, engine_key: str) -> EngineLoad:
    """The engine's running + waiting requests and when it counted them. Raises ``ConnectionRefusedError``
    when it refuses connections (gone), another ``OSError``, ``TimeoutError``, :class:`EngineBodyEnded` or
    ``ValueError`` when it cannot tell."""
    headers = {"Authorization": f"Bearer {engine_key}"}
    status, body = await _get(pool, origin, LOADS_PATH, headers)
    if status == 200:
        load = load_from_loads(json.loads(body))
        if load is not None:
            return load
    status, body = await _get(pool, origin, METRICS_PATH, headers)
    if status != 200:
        raise ValueError(f"the engine answered /metrics with HTTP {status}")
    return load_from_metrics(body.decode("utf-8", "replace"))


async def confirm_slot_free(
    pool: EnginePool, origin: str, engine_key: str, others_at_engine: Callable[[], int], bound_s: float
) -> SlotVerdict:
    """Poll until the engine runs at most ``others_at_engine()`` requests (the slot of the abandoned one is
    free), for at most ``bound_s``. An engine that refuses connections is gone (its supervisor reports that);
    one that answers nothing within the bound (frozen) is unconfirmed like one that keeps the slot. A figure
    taken before the call (an older snapshot) is read again, never taken as free."""
    let_go = time.time()  # wall clock: the engine stamps its snapshots with its own, on this host
    t0 = time.monotonic()
    end = t0 + bound_s
    last: int | None = None
    stale = 0
    interval = _FIRST_INTERVAL_S
    while True:
        try:
            load = await engine_load(pool, origin, engine_key)
        except ConnectionRefusedError:
            return SlotVerdict("engine_gone", (time.monotonic() - t0) * 1000, last, stale)
        except (OSError, TimeoutError, EngineBodyEnded, ValueError):
            pass
        else:
            last = load.total
            if last <= others_at_engine():
                if load.taken_at is None or load.taken_at >= let_go:
                    return SlotVerdict("free", (time.monotonic() - t0) * 1000, last, stale)
                stale += 1
        now = time.monotonic()
        if now >= end:
            return SlotVerdict("unconfirmed", (now - t0) * 1000, last, stale)
        await asyncio.sleep(min(interval, end - now))
        interval = min(interval * 1.5, _MAX_INTERVAL_S)
