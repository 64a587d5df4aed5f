"""The tool-call readiness probe, once per service epoch (spec §9.1 step 5): :class:`ToolProbes`.

A caller that needs tool calls (Codex, a Harbor agent) of a lock that claims them gets a service whose epoch has
answered one forced call; the first run to need it on an epoch makes the probe and the later ones reuse its answer
(``by_this_run`` says which). A failed probe is ``inference_engine_unhealthy`` before the run is bound.

Example::

    probe = await probes.probe(service_id, epoch, base_url, engine_key, wire_model)  # ToolCallProbeV1
"""

from __future__ import annotations

from harness.contracts.run_readiness import ToolCallProbeV1
from harness.engine.readiness import probe_tool_call

__all__ = ["TOOL_PROBE_TIMEOUT_S", "ToolProbes"]

TOOL_PROBE_TIMEOUT_S = 300.0  # a forced call of up to 64 tokens on a loaded CPU engine


class ToolProbes:
    """(service, epoch) -> the seconds its tool-call probe took, made at most once each."""

    def __init__(self, timeout_s: float = TOOL_PROBE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._seconds: dict[tuple[str, int], float] = {}

    async def probe(self, service_id: str, epoch: int, base_url: str, engine_key: str, wire_model: str) -> ToolCallProbeV1:
        known = self._seconds.get((service_id, epoch))
        if known is not None:
            return ToolCallProbeV1(seconds=known, by_this_run=False)
        seconds = await probe_tool_call(base_url, engine_key, wire_model, self.timeout_s)
        self._seconds[(service_id, epoch)] = seconds
        return ToolCallProbeV1(seconds=seconds, by_this_run=True)
