"""The CPU and RAM of one Harbor trial container: read from its task, held in the ledger, enforced by Docker.

A task may say what its container needs (``task.toml``: ``[environment] cpus``, ``memory_mb``, or Harbor's
deprecated ``memory = "2G"``); Harbor 0.25 leaves a task that says nothing unlimited. hitch gives every
trial container definite limits — the task's own, else :data:`DEFAULT_CPUS` and :data:`DEFAULT_MEMORY_MB` —
passes them to Harbor as the trial's resource overrides (enforced as the container's limits, so the
reservation is what the container really gets), and has the daemon hold them in its resource ledger for the
trial's run (:mod:`harness.daemon.trial_reservation`).
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

from harness.contracts.evaluation import TrialResourcesV1
from harness.errors import HitchError

__all__ = ["DEFAULT_CPUS", "DEFAULT_MEMORY_MB", "resources_of"]

DEFAULT_CPUS = 1.0  # an agent's shell, its commands and the verifier; the engine is not in the container
DEFAULT_MEMORY_MB = 2048
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)
_MB_PER = {"K": 1 / 1024, "": 1 / (1024 * 1024), "M": 1, "G": 1024, "T": 1024 * 1024}


def _invalid(task: Path, why: str, value: Any) -> HitchError:
    return HitchError("usage_error", f"{task / 'task.toml'}: {why}", {"task": str(task), "value": value})


def _memory_mb(task: Path, env: dict[str, Any]) -> int:
    value = env.get("memory_mb")
    if value is None and "memory" in env:  # Harbor's deprecated size string
        found = _SIZE.match(str(env["memory"]))
        if found is None:
            raise _invalid(task, "[environment] memory is a size like 2G or 512M", env["memory"])
        value = math.ceil(float(found.group(1)) * _MB_PER[found.group(2).upper()])
    if value is None:
        return DEFAULT_MEMORY_MB
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid(task, "[environment] memory_mb is a whole number of MiB, at least 1", value)
    return value


def resources_of(task: Path) -> TrialResourcesV1:
    """The limits of ``task``'s trial container: the task's own where it states them, else the defaults."""
    try:
        data = tomllib.loads((task / "task.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise _invalid(task, f"unreadable ({type(exc).__name__})", None) from exc
    env = data.get("environment") or {}
    if not isinstance(env, dict):
        raise _invalid(task, "[environment] is a table", env)
    cpus = env.get("cpus")
    if cpus is None:
        cpus = DEFAULT_CPUS
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not math.isfinite(cpus) or cpus <= 0:
        raise _invalid(task, "[environment] cpus is a positive number", cpus)
    return TrialResourcesV1(cpus=float(cpus), memory_mb=_memory_mb(task, env))
