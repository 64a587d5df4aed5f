"""A real gateway on its own event loop thread: the one rig tests, suites and benchmarks drive it with.

Synchronous callers (pytest tests, certification checks) hold a :class:`GatewayThread`: the gateway listens
on loopback, runs on a private uvloop in a daemon thread, and is reached through :meth:`run` (a coroutine on
its loop) and :meth:`call` (a plain function on its loop, e.g. ``register``). Nothing here is a fake: it is
the product's gateway, only hosted for a caller that has no event loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Self, TypeVar

import uvloop

from gateway.bindings import UpstreamTarget
from gateway.server import Gateway, GatewayConfig
from harness.contracts.binding import ModelEndpointBindingV1

__all__ = ["GatewayThread"]

T = TypeVar("T")


class GatewayThread:
    """A started :class:`~gateway.server.Gateway` on its own loop thread; :meth:`close` (or leaving a ``with``
    block) stops both."""

    def __init__(self, config: GatewayConfig) -> None:
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gateway-loop", daemon=True)
        self._thread.start()
        try:
            self.gw: Gateway = self.run(self._make(config))
            self.run(self.gw.start())
        except BaseException:
            self._stop_loop()
            raise

    @staticmethod
    async def _make(config: GatewayConfig) -> Gateway:
        return Gateway(config)  # built on its loop: aiohttp objects bind to the running loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        async def wrapped() -> T:
            return fn()

        return self.run(wrapped(), timeout)

    def register(self, run_id: str, target: UpstreamTarget, **kw: Any) -> ModelEndpointBindingV1:
        return self.call(lambda: self.gw.register(run_id, target, **kw))

    def token_of(self, record: ModelEndpointBindingV1) -> str:
        return Path(record.token_ref).read_text(encoding="utf-8").strip()

    def settle_evidence(self, timeout_s: float = 20.0) -> None:
        """Every exchange begun so far is on disk (a client may hold a reply's last byte before it is recorded)."""
        self.run(self.gw.settle_evidence(timeout_s), timeout_s + 5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.gw.stop())
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
