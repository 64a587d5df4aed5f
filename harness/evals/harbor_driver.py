"""The trial driver: runs inside Harbor's own venv (Python 3.12), started by :mod:`harness.evals.harbor_run`.

Harbor needs a newer Python than the project's, so it never runs in the hitch process: this module is
executed as ``<harbor venv>/bin/python harbor_driver.py`` and speaks JSON lines.

- stdin, first line: ``{"sys_path": [...], "trials": [SPEC, ...]}`` (``trials`` may be empty); then any
  number of ``{"trial": SPEC}`` lines (one more trial starts at once: the parent starts each trial when its
  run is bound and its resources are held) and ``{"cancel": NAME}`` lines. The parent closes stdin once no
  trial is left to start or to cancel; the driver then waits for the trials it has and exits.
- SPEC: ``{"name", "task_path", "trials_dir", "agent", "model_name", "base_url", "token_env", "token_file",
  "env", "agent_kwargs", "agent_timeout_s", "overlays", "cpus", "memory_mb"}`` (an in-container agent gets
  ``env`` — Harbor's agent env, ``${VAR}`` resolved from this process's environment — instead of
  ``base_url``). ``cpus`` and ``memory_mb`` become the trial container's own limits (Harbor's resource
  overrides, enforced as limits): what hitch reserved for it in the resource ledger.
- stdout: ``{"event": "started", "trial": NAME}`` when a trial's task begins, ``{"event": "finished",
  "trial": NAME, "reward": ..., "exception": ..., "cancelled": bool, "timing": {...}}`` when it ends, and
  ``{"event": "done"}`` last.

Each trial is one asyncio task around ``Trial.create(TrialConfig(...)).run()``, so cancelling one (a
``cancel`` line) cancels that task alone: Harbor records ``CancelledError`` and removes its containers,
the other trials go on. The model key of each trial is read from its run's 0600 token *file*
(``token_file``) into this process's environment variable ``token_env`` just before the trial starts, where
Harbor reads it (host-side agents: ``model_api_key_name``; in-container agents: ``${VAR}`` in their env);
it is never on an argv or on stdin, and is removed from the environment when the trial ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def _seconds(info: Any) -> float | None:
    if info is None or info.started_at is None or info.finished_at is None:
        return None
    delta: float = (info.finished_at - info.started_at).total_seconds()
    return round(delta, 3)


def _summary(result: Any) -> dict[str, Any]:
    rewards = result.verifier_result.rewards if result.verifier_result is not None else None
    exc = result.exception_info
    agent = result.agent_result
    started: datetime | None = result.started_at
    finished: datetime | None = result.finished_at
    total = round((finished - started).total_seconds(), 3) if started and finished else None
    phases = [p.finished_at for p in (result.verifier, result.agent_execution) if p is not None and p.finished_at]
    teardown = round((finished - phases[0]).total_seconds(), 3) if finished and phases else None
    return {
        "rewards": rewards,
        "reward": (rewards or {}).get("reward"),
        "exception": {"type": exc.exception_type, "message": exc.exception_message[:2000]} if exc else None,
        "agent_tokens": {"input": agent.n_input_tokens, "output": agent.n_output_tokens} if agent else None,
        "trial_dir": str(Path(result.trial_uri.removeprefix("file://"))),
        "timing": {
            "total_s": total,
            "environment_setup_s": _seconds(result.environment_setup),
            "agent_setup_s": _seconds(result.agent_setup),
            "agent_execution_s": _seconds(result.agent_execution),
            "verifier_s": _seconds(result.verifier),
            "teardown_s": teardown,
        },
    }


async def _one(spec: dict[str, Any]) -> dict[str, Any]:
    token_env = spec["token_env"]
    os.environ[token_env] = Path(spec["token_file"]).read_text(encoding="utf-8").strip()
    try:
        return await _trial(spec)
    finally:
        os.environ.pop(token_env, None)


async def _trial(spec: dict[str, Any]) -> dict[str, Any]:
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    config = TrialConfig(
        task=TaskConfig(path=Path(spec["task_path"])),
        trial_name=spec["name"],
        trials_dir=Path(spec["trials_dir"]),
        agent=AgentConfig(
            name=spec["agent"],
            model_name=spec.get("model_name"),
            base_url=spec.get("base_url"),
            model_api_key_name=spec["token_env"] if spec.get("base_url") else None,
            kwargs=spec.get("agent_kwargs") or {},
            env=spec.get("env") or {},
            override_timeout_sec=spec.get("agent_timeout_s"),
        ),
        environment=EnvironmentConfig(
            type="docker",
            extra_docker_compose=[Path(p) for p in spec["overlays"]],
            override_cpus=spec["cpus"],
            override_memory_mb=spec["memory_mb"],
            cpu_enforcement_policy="limit",
            memory_enforcement_policy="limit",
        ),
    )
    trial = await Trial.create(config)
    _emit({"event": "started", "trial": spec["name"]})
    try:
        result = await trial.run()
    except asyncio.CancelledError:
        return {"cancelled": True, **_summary(trial.result)}
    return {"cancelled": False, **_summary(result)}


async def _main() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    first = json.loads(await reader.readline())
    sys.path[:0] = first.get("sys_path") or []  # a custom agent's module (--agent module:Class)
    tasks: dict[str, asyncio.Task[dict[str, Any]]] = {}
    reports: list[asyncio.Task[None]] = []

    async def report(name: str, task: asyncio.Task[dict[str, Any]]) -> None:
        try:
            out = await task
        except asyncio.CancelledError:  # cancelled before Trial.run() began: nothing to clean
            out = {"cancelled": True, "reward": None, "exception": {"type": "CancelledError", "message": ""}}
        except Exception as exc:  # a trial that could not even be created
            out = {"cancelled": False, "reward": None, "exception": {"type": type(exc).__name__, "message": str(exc)[:2000]}}
        _emit({"event": "finished", "trial": name, **out})

    def start(spec: dict[str, Any]) -> None:
        name = spec["name"]
        tasks[name] = asyncio.create_task(_one(spec), name=name)
        reports.append(asyncio.create_task(report(name, tasks[name])))

    for spec in first.get("trials") or []:
        start(spec)
    while line := await reader.readline():
        message = json.loads(line)
        if "trial" in message:
            start(message["trial"])
        elif message.get("cancel") in tasks:
            tasks[message["cancel"]].cancel()
    await asyncio.gather(*reports)
    _emit({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main()))
