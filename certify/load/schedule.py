"""What every load target shares beside its schedule (:class:`harness.app.load_schedule.LoadSchedule`): the
prompt set, the request bodies, the plan one runner process reads. Nothing here imports locust.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.app.load_schedule import Api, LoadSchedule

__all__ = ["PROMPTS", "TargetPlan", "caller_body", "route_for", "schedule_facts"]

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


def route_for(api: Api) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/responses"


def schedule_facts(schedule: LoadSchedule) -> dict[str, Any]:
    """The schedule as a summary records it (with the size of the prompt set)."""
    return {**schedule.model_dump(mode="json"), "prompts": len(PROMPTS)}


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
            "schedule": self.schedule.model_dump(mode="json"),
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
