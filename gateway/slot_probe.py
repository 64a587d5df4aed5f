"""Did the engine free an abandoned request's slot? (spec §9.2: no faked cancel)

When the gateway abandons a request it forwarded (the client left, a timeout, a size cap) it closes the
engine connection, which makes SGLang abort the request; the permit of that request is handed on only once
the engine *shows* the slot free. Owns:

- :func:`engine_load`: requests running or waiting in the engine, from ``GET /v1/loads`` (SGLang >= 0.5.8 and
  the fake answer alike: ``num_running_reqs + num_waiting_reqs`` summed over its ranks), else SGLang's
  ``/metrics`` gauges (``sglang:num_running_reqs + sglang:num_queue_reqs``); :func:`load_from_json` and
  :func:`load_from_metrics` parse them (the certification kit reads the engine's load with them too);
- :func:`confirm_slot_free`: polls the load until it is at most the service's other requests at the engine
  (its queue's :attr:`~gateway.admission.FairQueue.at_engine`, less this one), or the bound passes.

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

__all__ = ["SlotVerdict", "confirm_slot_free", "engine_load", "load_from_json", "load_from_metrics"]

_PROBE_TIMEOUT_S = 5.0
# polls start fast (an engine that honours the abort shows it within a scheduler step or two) and back off, so a
# slow engine is not also kept busy answering load probes
_FIRST_INTERVAL_S = 0.02
_MAX_INTERVAL_S = 0.5
_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs")


@dataclass(frozen=True)
class SlotVerdict:
    outcome: Literal["free", "unconfirmed", "engine_gone"]
    waited_ms: float
    engine_load: int | None  # the last load read (None: never read)


def load_from_json(body: bytes) -> int | None:
    """``/v1/loads``: running + waiting over every rank; None for another shape."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    loads = obj.get("loads") if isinstance(obj, dict) else None
    if not isinstance(loads, list):
        return None
    total = 0
    for load in loads:
        if not isinstance(load, dict):
            return None
        total += int(load.get("num_running_reqs", 0)) + int(load.get("num_waiting_reqs", 0))
    return total


def load_from_metrics(text: str) -> int:
    """SGLang's Prometheus text: running + queued requests (every label set summed)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(_GAUGES):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


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


async def engine_load(pool: EnginePool, origin: str, engine_key: str) -> int:
    """The engine's running + waiting requests. Raises ``ConnectionRefusedError`` when it refuses connections
    (gone), another ``OSError``, ``TimeoutError``, :class:`EngineBodyEnded` or ``ValueError`` when it cannot tell."""
    headers = {"Authorization": f"Bearer {engine_key}"}
    status, body = await _get(pool, origin, "/v1/loads", headers)
    if status == 200:
        load = load_from_json(body)
        if load is not None:
            return load
    status, body = await _get(pool, origin, "/metrics", headers)
    if status != 200:
        raise ValueError(f"the engine answered /metrics with HTTP {status}")
    return load_from_metrics(body.decode("utf-8", "replace"))


async def confirm_slot_free(
    pool: EnginePool, origin: str, engine_key: str, others_at_engine: Callable[[], int], bound_s: float
) -> SlotVerdict:
    """Poll until the engine runs at most ``others_at_engine()`` requests (the slot of the abandoned one is
    free), for at most ``bound_s``. An engine that refuses connections is gone (its supervisor reports that);
    one that answers nothing within the bound (frozen) is unconfirmed like one that keeps the slot."""
    t0 = time.monotonic()
    end = t0 + bound_s
    last: int | None = None
    interval = _FIRST_INTERVAL_S
    while True:
        try:
            last = await engine_load(pool, origin, engine_key)
        except ConnectionRefusedError:
            return SlotVerdict("engine_gone", (time.monotonic() - t0) * 1000, last)
        except (OSError, TimeoutError, EngineBodyEnded, ValueError):
            pass
        else:
            if last <= others_at_engine():
                return SlotVerdict("free", (time.monotonic() - t0) * 1000, last)
        now = time.monotonic()
        if now >= end:
            return SlotVerdict("unconfirmed", (now - t0) * 1000, last)
        await asyncio.sleep(min(interval, end - now))
        interval = min(interval * 1.5, _MAX_INTERVAL_S)
