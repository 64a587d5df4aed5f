"""The margins a comparison decides by: per kind of figure, how far apart two measurements may be and still be
``same`` (:mod:`harness.compare.decide`).

A figure's margin is ``max(absolute, relative x |the baseline's estimate|)`` in the figure's own unit. The
margins are data, not code: every signed entry (predicate schema 4) carries the table it was made under
(``CertificationResultV1.margins``), and ``hitch catalog reproduce`` decides by the *entry's* table, so a later
tool with other defaults still decides an old entry by the rule it was published with.

Why these values (``docs/reproducing.md`` has the measured error rates):

- ``latency`` (a request's end-to-end time, time to first token, the engine's share; percentiles): 5 % of the
  baseline, at least 0.5 ms. Half the 10 % slowdown the rule must notice, so a real 10 % shift lies outside.
- ``gateway_time`` (time in the gateway, what it adds, the paired shift, the black-box difference): 2 ms, the
  floor of the §15.4 paired-shift target: tens of microseconds between two runs are the same gateway.
- ``throughput`` (requests per second, ratios of throughputs): 5 %.
- ``token_count`` (input/output tokens): 0.5 token, i.e. any whole token apart differs.
- ``logprob_gap`` (a token's logprob between two runs, nats): 0.25, the correctness suite's own tolerance.
- ``agent_time`` (an agent's time per trial, s): 10 %, at least 1 s.
- ``count`` (requests per trial, a reward): 10 %, at least 0.5.
- ``share`` (trials solved out of trials run): 0.1 (ten points).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.contracts.base import Record

__all__ = ["DEFAULT_MARGINS", "FigureKind", "MarginV1", "margin_for"]

FigureKind = Literal["latency", "gateway_time", "throughput", "token_count", "logprob_gap", "agent_time", "count", "share"]


class MarginV1(Record):
    """Two measurements of one figure are the same when their difference's interval lies within
    ``max(absolute, relative x |baseline|)``."""

    relative: float = Field(ge=0, description="a fraction of the baseline's estimate")
    absolute: float = Field(ge=0, description="a floor, in the figure's own unit")


DEFAULT_MARGINS: dict[FigureKind, MarginV1] = {
    "latency": MarginV1(relative=0.05, absolute=0.5),
    "gateway_time": MarginV1(relative=0.0, absolute=2.0),
    "throughput": MarginV1(relative=0.05, absolute=0.0),
    "token_count": MarginV1(relative=0.0, absolute=0.5),
    "logprob_gap": MarginV1(relative=0.0, absolute=0.25),
    "agent_time": MarginV1(relative=0.10, absolute=1.0),
    "count": MarginV1(relative=0.10, absolute=0.5),
    "share": MarginV1(relative=0.0, absolute=0.10),
}


def margin_for(margin: MarginV1, baseline: float | None) -> float:
    """The margin in the figure's unit around ``baseline`` (its estimate in the reference measurement)."""
    return max(margin.absolute, margin.relative * abs(baseline or 0.0))
