"""The trial driver: runs inside Harbor's own venv (Python 3.12), started by :mod:`harness.evals.harbor_run`.

Harbor needs a newer Python than the project's, so it never runs in the hitch process: this module is
executed as ``<harbor venv>/bin/python harbor_driver.py`` and speaks JSON lines.

- stdin, first line: ``{"trials": [{"name", "task_path", "trials_dir", "agent", "model_name", "base_url",
  "api_key_env", "env", "agent_kwargs", "overlays"}], "sys_path": [...]}`` (an in-container agent gets
  ``env`` — Harbor's agent env, ``${VAR}`` resolved from this process's environment — instead of
  ``base_url``/``api_key_env``); then
  any number of ``{"cancel": NAME}`` lines.
- stdout: ``{"event": "started", "trial": NAME}`` when a trial's task begins, ``{"event": "finished",
  "trial": NAME, "reward": ..., "exception": ..., "cancelled": bool, "timing": {...}}`` when it ends, and
  ``{"event": "done"}`` last.

A spec with ``regrade_of`` (a kept trial directory) is a verifier-only rerun: Harbor's regrade
(``TrialConfig.source_trial``, action ``regrade``) restores that trial's recorded agent output and artifacts and
runs the task's verifier against them in a separate verifier environment; the agent never runs and no model is
called (its agent config is the source trial's, recorded, unused).

Each trial is one asyncio task around ``Trial.create(TrialConfig(...)).run()``, so cancelling one (a
``cancel`` line) cancels that task alone: Harbor records ``CancelledError`` and removes its containers,
the other trials go on. The model key of each trial is read by Harbor from the environment variable named
``api_key_env`` (set by the parent; never on argv or stdin).
"""

from __future__ import annotations

import asyncio
import json
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


def _agent(spec: dict[str, Any]) -> Any:
    from harbor.models.trial.config import AgentConfig

    if spec.get("regrade_of"):  # the source trial's resolved agent config, as Harbor's regrade requires
        source = json.loads((Path(spec["regrade_of"]) / "config.json").read_text(encoding="utf-8"))
        return AgentConfig.model_validate(source["agent"])
    return AgentConfig(
        name=spec["agent"],
        model_name=spec.get("model_name"),
        base_url=spec.get("base_url"),
        model_api_key_name=spec.get("api_key_env"),
        kwargs=spec.get("agent_kwargs") or {},
        env=spec.get("env") or {},
        override_timeout_sec=spec.get("agent_timeout_s"),
    )


async def _one(spec: dict[str, Any]) -> dict[str, Any]:
    from harbor.models.trial.config import EnvironmentConfig, SourceTrialConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    source = spec.get("regrade_of")
    config = TrialConfig(
        task=TaskConfig(path=Path(spec["task_path"])),
        trial_name=spec["name"],
        trials_dir=Path(spec["trials_dir"]),
        agent=_agent(spec),
        environment=EnvironmentConfig(type="docker", extra_docker_compose=[Path(p) for p in spec["overlays"]]),
        source_trial=SourceTrialConfig(action="regrade", type="local", path=Path(source)) if source else None,
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
    first = await reader.readline()
    message = json.loads(first)
    sys.path[:0] = message.get("sys_path") or []  # a custom agent's module (--agent module:Class)
    specs = message["trials"]
    tasks = {s["name"]: asyncio.create_task(_one(s), name=s["name"]) for s in specs}

    async def listen() -> None:
        while line := await reader.readline():
            name = json.loads(line).get("cancel")
            if name in tasks:
                tasks[name].cancel()

    async def report(name: str, task: asyncio.Task[dict[str, Any]]) -> None:
        try:
            out = await task
        except asyncio.CancelledError:  # cancelled before Trial.run() began: nothing to clean
            out = {"cancelled": True, "reward": None, "exception": {"type": "CancelledError", "message": ""}}
        except Exception as exc:  # a trial that could not even be created
            out = {"cancelled": False, "reward": None, "exception": {"type": type(exc).__name__, "message": str(exc)[:2000]}}
        _emit({"event": "finished", "trial": name, **out})

    listener = asyncio.create_task(listen())
    await asyncio.gather(*(report(name, task) for name, task in tasks.items()))
    listener.cancel()
    _emit({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main()))
