"""The schedule of a load benchmark (``hitch bench load``): what the CLI checks before it starts anything and
what every load target runs alike (:mod:`certify.load`).

One :class:`LoadSchedule` drives the direct and the gateway run alike (users, spawn rate, run time, seed, output
budget, API, stream), so the two sets of figures differ only by the path the requests take. A bad value is a
``usage_error`` (exit 2). Nothing here imports locust.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import model_validator

from harness.contracts.base import Record
from harness.errors import HitchError

__all__ = ["APIS", "MAX_RUN_TIME_S", "MAX_USERS", "TARGETS", "Api", "LoadSchedule", "parse_run_time", "targets_for"]

Api = Literal["chat", "responses"]
APIS: tuple[Api, ...] = ("chat", "responses")
TARGETS = ("gateway", "direct", "both")
MAX_RUN_TIME_S = 24 * 3600
MAX_USERS = 100_000
_SPAN = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_run_time(text: str) -> float:
    """``30``, ``30s``, ``2m``, ``1m30s``, ``1h`` -> seconds (1 s to 24 h)."""
    raw = text.strip().lower()
    seconds: float
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        seconds = float(raw)
    else:
        m = _SPAN.fullmatch(raw)
        if not raw or m is None:
            raise HitchError("usage_error", f"run time {text!r} is not like 30, 30s, 2m, 1m30s or 1h", {"run_time": text})
        h, mi, s = (int(g) if g else 0 for g in m.groups())
        seconds = float(h * 3600 + mi * 60 + s)
    if not 1 <= seconds <= MAX_RUN_TIME_S:
        raise HitchError("usage_error", "run time must be between 1 s and 24 h", {"run_time": text})
    return seconds


def targets_for(target: str) -> list[str]:
    """The order the targets run in: direct first, then gateway, against the same engine."""
    if target not in TARGETS:
        raise HitchError("usage_error", f"target must be one of {', '.join(TARGETS)}", {"target": target})
    return ["direct", "gateway"] if target == "both" else [target]


class LoadSchedule(Record):
    users: int
    spawn_rate: float
    run_time_s: float
    seed: int = 0
    max_tokens: int = 16
    api: Api = "chat"
    stream: bool = True

    @model_validator(mode="before")
    @classmethod
    def _in_range(cls, data: Any) -> Any:
        """Each bound as a ``usage_error`` naming it (before the types are checked)."""
        if not isinstance(data, dict):
            return data
        users, rate, run_time = data.get("users", 0), data.get("spawn_rate", 0), data.get("run_time_s", 0)
        max_tokens, api = data.get("max_tokens", 16), data.get("api", "chat")
        if not isinstance(users, int) or not 1 <= users <= MAX_USERS:
            raise HitchError("usage_error", f"users must be between 1 and {MAX_USERS}", {"users": users})
        if not isinstance(rate, int | float) or not rate > 0:
            raise HitchError("usage_error", "spawn rate must be greater than 0", {"spawn_rate": rate})
        if not isinstance(run_time, int | float) or not 1 <= run_time <= MAX_RUN_TIME_S:
            raise HitchError("usage_error", "run time must be between 1 s and 24 h", {"run_time_s": run_time})
        if not isinstance(max_tokens, int) or not 1 <= max_tokens <= 4096:
            raise HitchError("usage_error", "max tokens must be between 1 and 4096", {"max_tokens": max_tokens})
        if api not in APIS:
            raise HitchError("usage_error", f"api must be one of {', '.join(APIS)}", {"api": api})
        return data
