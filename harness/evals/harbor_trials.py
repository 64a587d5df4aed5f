"""What a Harbor evaluation and its trials are made of (:mod:`harness.evals.harbor_run` runs them).

Owns :class:`EvalOptions`, :class:`Trial` and what is decided per trial around Harbor: how the agent reaches
the model (:func:`model_connection`), the trial container's compose overlay (:data:`OVERLAY`,
:func:`container_overlay`), its agent budget (:func:`trial_budget_s`), the tasks (:func:`task_dirs`), the task
images' base (:func:`base_image_id`), and a trial's outcome from Harbor's result and its run's record
(:func:`trial_outcome`). For example::

    model_connection("terminus-2", "docker")  # "host": Harbor's process calls the model
    task_dirs(Path("tasks"))  # every folder holding a task.toml, sorted
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contracts.evaluation import (
    TrialOutcomeV1,
    TrialResourcesV1,
    TrialServiceV1,
    TrialTimingV1,
    TrialUsageV1,
)
from harness.contracts.run import RunErrorV1
from harness.docker_engine import docker_client
from harness.errors import ENGINE_FAILURE_CODES, HitchError
from harness.evals.harbor_agents import NO_MODEL_AGENTS, TERMINUS
from harness.paths import HitchRoot

__all__ = [
    "BASE_IMAGE",
    "OVERLAY",
    "EvalOptions",
    "Trial",
    "base_image_id",
    "container_overlay",
    "model_connection",
    "task_dirs",
    "trial_budget_s",
    "trial_error",
    "trial_outcome",
]

HOST_SIDE_AGENTS = frozenset({TERMINUS})  # call the model from Harbor's process (LiteLLM)
LOCAL_ENVIRONMENTS = frozenset({"docker"})
# Harbor's Docker environment: a quick stop (PID 1 `sleep infinity` ignores SIGTERM: ~10 s lost per trial)
# and no network for the trial container: a host-side agent needs none, and nothing in it can reach the
# engine, the gateway or another trial.
OVERLAY = "services:\n  main:\n    stop_grace_period: 1s\n    network_mode: none\n"
BASE_IMAGE = "hitch/harbor-base:dev"  # the task images' base (scripts/ci/build_harbor_base_image.py)


def container_overlay(network: str) -> str:
    """An in-container agent's trial: on hitch's internal eval network only (no default bridge, no egress)."""
    return (
        "services:\n  main:\n    stop_grace_period: 1s\n    networks: [hitch_eval]\n"
        f"networks:\n  hitch_eval:\n    external: true\n    name: {json.dumps(network)}\n"
    )


def trial_budget_s(task: Path, override_s: float | None) -> float | None:
    """A trial's agent budget: the override Harbor is given, else the task's ``[agent] timeout_sec``."""
    if override_s is not None:
        return override_s
    try:
        agent = tomllib.loads((task / "task.toml").read_text(encoding="utf-8")).get("agent", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    value = agent.get("timeout_sec") if isinstance(agent, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def model_connection(agent: str, environment: str) -> str:
    """``host``, ``container`` or ``none``; an environment off this host is refused, never approximated."""
    if environment not in LOCAL_ENVIRONMENTS:
        raise HitchError(
            "local_inference_topology_unsupported",
            f"Harbor environment {environment!r} runs trials off this host; the local gateway listens on this "
            "host (loopback and hitch's eval network) and is not reachable from there",
            {"environment": environment, "supported": sorted(LOCAL_ENVIRONMENTS)},
        )
    if agent in HOST_SIDE_AGENTS:
        return "host"
    if agent in NO_MODEL_AGENTS:
        return "none"
    return "container"


def base_image_id(tag: str = BASE_IMAGE) -> str:
    """The ID of the task images' base: what the daemon's reachability probe runs for in-container trials."""
    client = docker_client()
    try:
        return str(client.images.get(tag).id)
    except Exception as exc:  # docker.errors.ImageNotFound / APIError
        raise HitchError(
            "harness_unavailable",
            f"{tag} is not built (scripts/ci/build_harbor_base_image.py)",
            {"image": tag, "cause": type(exc).__name__},
        ) from exc
    finally:
        client.close()


def task_dirs(path: Path) -> list[Path]:
    """One task directory (it holds ``task.toml``) or a folder of them, sorted."""
    if (path / "task.toml").is_file():
        return [path]
    found = sorted(p.parent for p in path.glob("*/task.toml"))
    if not found:
        raise HitchError("usage_error", f"{path} is not a Harbor task nor a folder of tasks (no task.toml)", {"path": str(path)})
    return found


@dataclass(frozen=True)
class EvalOptions:
    tasks: list[Path]
    agent: str = "terminus-2"
    environment: str = "docker"
    k: int = 1
    n_concurrent: int = 2
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    evaluation_id: str | None = None
    eval_image: str | None = None  # in-container agents: the pinned image the daemon probes with (default: base)
    agent_paths: list[Path] = field(default_factory=list)  # put on Harbor's sys.path (a custom agent's module)
    agent_timeout_s: float | None = None  # instead of each task's [agent] timeout_sec (Harbor's override_timeout_sec)
    infra_retries: int = 1  # runs again of a trial whose engine failed (same lock, new run)
    agent_profile_id: str | None = None  # the compatibility profile the agent was admitted with (harbor_agents)
    certifying: bool = False  # the trials certify the agent (pytest certify): the daemon admits them without a profile
    require_model_capture: bool = False  # a trial whose capture (its run's evidence) is incomplete fails the evaluation


@dataclass
class Trial:
    """One attempt of one trial of the evaluation."""

    name: str  # = run_id: unique on this host, so Harbor's compose projects of two evaluations never meet
    task: Path
    run_id: str
    token_env: str
    resources: TrialResourcesV1
    slot: int  # which trial of the evaluation this is an attempt of
    attempt: int = 0
    earlier: list[TrialOutcomeV1] = field(default_factory=list)  # the failed attempts before this one
    run: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    outcome: TrialOutcomeV1 | None = None


def trial_error(event: dict[str, Any]) -> HitchError | None:
    if event.get("cancelled"):
        return HitchError("run_cancelled", "the trial was cancelled", {})
    exc = event.get("exception")
    if exc:
        return HitchError("harness_run_failed", f"Harbor trial raised {exc.get('type')}: {str(exc.get('message'))[:500]}", {})
    if event.get("reward") is None:
        return HitchError("harness_run_failed", "the trial ended without a reward", {})
    return None


def trial_outcome(root: HitchRoot, trial: Trial, record: dict[str, Any]) -> TrialOutcomeV1:
    result = trial.result or {}
    usage = service = None
    execution = root.run_inference_dir(trial.run_id) / "execution.json"
    with contextlib.suppress(OSError, ValueError):
        ev = json.loads(execution.read_text(encoding="utf-8"))
        usage = TrialUsageV1(
            requests=ev["requests"],
            input_tokens=ev["attempts"]["input_tokens"],
            output_tokens=ev["attempts"]["output_tokens"],
            evidence_complete=ev["complete"],
        )
        service = TrialServiceV1(
            service_id=ev["service_id"], epoch=ev["epoch"], inference_id=ev["inference_id"], reused_service=ev["reused_service"]
        )
    err = record.get("error")
    rewards = result.get("rewards")
    reward = result.get("reward")
    if err and err.get("code") in ENGINE_FAILURE_CODES:  # the engine failed under it: no reward, never a 0
        rewards = reward = None
    exc = result.get("exception") or {}
    timing = result.get("timing")
    return TrialOutcomeV1(
        trial=trial.name,
        task=trial.task.name,
        run_id=trial.run_id,
        binding_id=record.get("binding_id"),
        status=record["status"],
        error=RunErrorV1(code=err["code"], message=err["message"]) if err else None,
        reward=float(reward) if isinstance(reward, (int, float)) else None,
        rewards={str(k): float(v) for k, v in rewards.items()} if isinstance(rewards, dict) else None,
        harbor_exception=exc.get("type"),
        usage=usage,
        service=service,
        timing=TrialTimingV1(**timing) if isinstance(timing, dict) else None,
        resources=trial.resources,
    )
