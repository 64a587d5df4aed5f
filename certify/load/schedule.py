"""The load schedule shared by every target: options and their checks, the prompt set, the request bodies.

One :class:`LoadSchedule` drives the direct and the gateway run alike (users, spawn rate, run time, prompt
set, seed, output budget, API, stream), so the two sets of figures differ only by the path the requests
take. Bad values are a ``usage_error`` (exit 2). Nothing here imports locust.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from harness.errors import HitchError

__all__ = [
    "APIS",
    "PROMPTS",
    "TARGETS",
    "LoadSchedule",
    "TargetPlan",
    "caller_body",
    "parse_run_time",
    "route_for",
    "targets_for",
]

Api = Literal["chat", "responses"]
APIS: tuple[Api, ...] = ("chat", "responses")
TARGETS = ("gateway", "direct", "both")

# Short, fixed prompts: the benchmark measures the serving path, not generation length.
PROMPTS: tuple[str, ...] = (
    "Write one short line about the sea.",
    "Name three prime numbers.",
    "Say hello in French.",
    "Give a one-word synonym for fast.",
    "What is two plus two?",
    "List two colours of the rainbow.",
    "Describe a cat in five words.",
    "Suggest a name for a small boat.",
)

_SPAN = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
MAX_RUN_TIME_S = 24 * 3600
MAX_USERS = 100_000


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


def route_for(api: Api) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/responses"


def targets_for(target: str) -> list[str]:
    """The order the targets run in: direct first, then gateway, against the same engine."""
    if target not in TARGETS:
        raise HitchError("usage_error", f"target must be one of {', '.join(TARGETS)}", {"target": target})
    return ["direct", "gateway"] if target == "both" else [target]


@dataclass(frozen=True)
class LoadSchedule:
    users: int
    spawn_rate: float
    run_time_s: float
    seed: int = 0
    max_tokens: int = 16
    api: Api = "chat"
    stream: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.users <= MAX_USERS:
            raise HitchError("usage_error", f"users must be between 1 and {MAX_USERS}", {"users": self.users})
        if not self.spawn_rate > 0:
            raise HitchError("usage_error", "spawn rate must be greater than 0", {"spawn_rate": self.spawn_rate})
        if not 1 <= self.run_time_s <= MAX_RUN_TIME_S:
            raise HitchError("usage_error", "run time must be between 1 s and 24 h", {"run_time_s": self.run_time_s})
        if not 1 <= self.max_tokens <= 4096:
            raise HitchError("usage_error", "max tokens must be between 1 and 4096", {"max_tokens": self.max_tokens})
        if self.api not in APIS:
            raise HitchError("usage_error", f"api must be one of {', '.join(APIS)}", {"api": self.api})

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "prompts": len(PROMPTS)}


def caller_body(schedule: LoadSchedule, model: str, prompt: str) -> dict[str, Any]:
    """The body a caller sends; the direct arm sends what the gateway would forward for it."""
    if schedule.api == "chat":
        return {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": schedule.max_tokens,
            "stream": schedule.stream,
        }
    return {"model": model, "input": prompt, "max_output_tokens": schedule.max_tokens, "stream": schedule.stream}


@dataclass(frozen=True)
class TargetPlan:
    """What one runner process needs: where to send, the token file (0600), one body per prompt."""

    name: str
    base_url: str  # ends in /v1
    token_file: str
    bodies: list[str]
    schedule: LoadSchedule

    def write(self, path: Path) -> None:
        data = {
            "name": self.name,
            "base_url": self.base_url,
            "token_file": self.token_file,
            "bodies": self.bodies,
            "schedule": asdict(self.schedule),
        }
        path.write_text(json.dumps(data))

    @classmethod
    def read(cls, path: Path) -> TargetPlan:
        data = json.loads(path.read_text())
        return cls(
            name=data["name"],
            base_url=data["base_url"],
            token_file=data["token_file"],
            bodies=list(data["bodies"]),
            schedule=LoadSchedule(**data["schedule"]),
        )
