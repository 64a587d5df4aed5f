"""``hitch eval harbor``: Harbor trials on a local model, one run binding per trial, one evaluation record.

What it does, in order:

1. :func:`model_connection` decides how the agent reaches the model, and refuses what the local gateway
   cannot serve with ``local_inference_topology_unsupported`` (it never pretends): a Harbor environment off
   this host (daytona, modal, e2b, runloop, ...) cannot reach a gateway on this host. ``terminus-2`` calls
   the model from Harbor's own process (LiteLLM): the gateway on loopback serves it and the trial container
   gets no network at all (``host``). Any other model-calling agent calls from inside its container
   (``container``): each run is created ``for_containers`` (the daemon probes that a container of the
   eval image reaches the gateway on hitch's eval network and none of the engine's addresses, or refuses
   with the same code), the trial container joins that internal network only, and the agent gets
   ``OPENAI_BASE_URL`` (its binding's container-facing URL) and ``OPENAI_API_KEY`` (``${HITCH_TRIAL_TOKEN_n}``,
   resolved by Harbor from its environment) through Harbor's agent env — never the engine's address or key.
2. One run per trial through the daemon (``POST /v1/runs``): the first prepares the lock and the service,
   every later one pins that ``inference_id`` and leases the same service — one engine, one binding (own
   token, evidence, budget) per trial. Runs are created wave by wave, ``n_concurrent`` at a time. The trial's
   agent budget (``EvalOptions.agent_timeout_s``, else the task's ``[agent] timeout_sec``) is its run's
   deadline, so no model request outlives the trial (:func:`trial_budget_s`).
3. Harbor runs the wave in its own venv (:mod:`harness.evals.harbor_driver`, one asyncio task per trial):
   each trial reads its token from its own environment variable. A trial whose run is cancelled
   (``hitch run cancel RUN_ID``, or :meth:`HarborEvaluation.cancel`) is cancelled alone in Harbor.
4. When a trial ends its run is finished (binding revoked, lease released, execution evidence written) and
   the trial's outcome is taken from Harbor's result (reward, timings) and the run's evidence (status,
   requests and tokens as the gateway counted them, the service).
5. ``evals/<id>/evaluation.json`` (:class:`EvaluationRecordV1`).
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import secrets
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.contracts.evaluation import (
    EvaluationRecordV1,
    TrialOutcomeV1,
    TrialServiceV1,
    TrialTimingV1,
    TrialUsageV1,
)
from harness.contracts.run import RunErrorV1
from harness.daemon import DaemonClient
from harness.daemon.run_store import RunStore
from harness.errors import HitchError
from harness.evals.harbor_install import HarborInstall
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir

__all__ = ["EvalOptions", "HarborEvaluation", "model_connection", "task_dirs", "trial_budget_s"]

DRIVER = Path(__file__).resolve().parent / "harbor_driver.py"
HOST_SIDE_AGENTS = frozenset({"terminus-2"})  # call the model from Harbor's process (LiteLLM)
NO_MODEL_AGENTS = frozenset({"oracle", "nop"})
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


_EVAL_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
_RUN_FIELDS_PINNED = ("engine", "launcher", "runtime", "fake_flags", "image", "capture", "capture_max_bytes")


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
    from harness.launch.docker_errors import docker_client

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


@dataclass
class _Trial:
    name: str  # = run_id: unique on this host, so Harbor's compose projects of two evaluations never meet
    task: Path
    run_id: str
    token_env: str
    run: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    outcome: TrialOutcomeV1 | None = None


class HarborEvaluation:
    """One evaluation: its trials, the driver process of the current wave, the record."""

    def __init__(
        self, root: HitchRoot, install: HarborInstall, client: DaemonClient, run_body: dict[str, Any], options: EvalOptions
    ) -> None:
        if options.k < 1 or options.n_concurrent < 1:
            raise HitchError("usage_error", "-k and -n are at least 1", {"k": options.k, "n": options.n_concurrent})
        self.connection = model_connection(options.agent, options.environment)
        self.root, self.install, self.client, self.options = root, install, client, options
        self.run_body = dict(run_body)
        self.evaluation_id = options.evaluation_id or "eval-" + secrets.token_hex(6)
        if not _EVAL_ID.match(self.evaluation_id):  # it names runs and Harbor's compose projects
            raise HitchError("usage_error", "an evaluation id is 1..40 of [a-z0-9-], starting alphanumeric", {})
        self.dir = root.path / "evals" / self.evaluation_id
        self.trials = [
            _Trial(
                f"{self.evaluation_id}-{task.name}-{i}",
                task.resolve(),
                f"{self.evaluation_id}-{task.name}-{i}",
                f"HITCH_TRIAL_TOKEN_{n}",
            )
            for n, (task, i) in enumerate((t, i) for t in options.tasks for i in range(options.k))
        ]
        self.inference_id: str | None = run_body.get("inference_id")
        self.eval_image = (options.eval_image or base_image_id()) if self.connection == "container" else None
        self._stdin: IO[str] | None = None
        self._stdin_lock = threading.Lock()

    # -- public ----------------------------------------------------------------------------------------

    def cancel(self, trial: str) -> bool:
        """Cancel one live trial in Harbor (its run then ends ``cancelled``); False when it is not live."""
        with self._stdin_lock:
            if self._stdin is None or self._stdin.closed:
                return False
            with contextlib.suppress(OSError, ValueError):
                self._stdin.write(json.dumps({"cancel": trial}) + "\n")
                self._stdin.flush()
                return True
        return False

    def run(self, on_event: Callable[[dict[str, Any]], None] | None = None) -> EvaluationRecordV1:
        ensure_private_dir(self.dir)
        overlay = self.dir / "overlay.compose.yaml"
        started = time.time()
        n = self.options.n_concurrent
        for first in range(0, len(self.trials), n):
            self._wave(self.trials[first : first + n], overlay, on_event)
        record = EvaluationRecordV1(
            evaluation_id=self.evaluation_id,
            tool_version=str(self.install.versions.get("harbor", "unknown")),
            agent=self.options.agent,
            model_connection=self.connection,
            environment="docker",
            inference_id=self.inference_id,
            engine=str(self.run_body.get("engine", "sglang")),
            started_at=started,
            finished_at=time.time(),
            trials=[t.outcome for t in self.trials if t.outcome is not None],
        )
        atomic_write_json(self.dir / "evaluation.json", record.to_json_dict())
        return record

    # -- one wave ----------------------------------------------------------------------------------------

    def _create_run(self, trial: _Trial) -> None:
        if self.inference_id is None:
            body = {**self.run_body}
        else:  # the lock and service are prepared: every later trial pins them
            body = {k: self.run_body[k] for k in _RUN_FIELDS_PINNED if k in self.run_body} | {"inference_id": self.inference_id}
        body.update(run_id=trial.run_id, harness=f"harbor:{self.options.agent}")
        budget = trial_budget_s(trial.task, self.options.agent_timeout_s)
        if budget is not None:
            body["deadline_s"] = budget
        if self.eval_image is not None:
            body.update(for_containers=True, eval_image=self.eval_image)
        trial.run = self.client.request("POST", "/v1/runs", body, timeout_s=900.0)
        self.inference_id = str(trial.run["inference_id"])

    def _spec(self, trial: _Trial, overlay: Path) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": trial.name,
            "task_path": str(trial.task),
            "trials_dir": str(self.dir / "trials"),
            "agent": self.options.agent,
            "model_name": f"openai/{trial.run['wire_model']}",
            "agent_kwargs": self.options.agent_kwargs,
            "agent_timeout_s": self.options.agent_timeout_s,
            "overlays": [str(overlay)],
        }
        if self.connection == "container":  # Harbor resolves ${VAR} from its own environment: no key on stdin
            spec["env"] = {"OPENAI_BASE_URL": trial.run["base_url"], "OPENAI_API_KEY": f"${{{trial.token_env}}}"}
        else:
            spec.update(base_url=trial.run["base_url"], api_key_env=trial.token_env)
        return spec

    def _wave(self, wave: list[_Trial], overlay: Path, on_event: Callable[[dict[str, Any]], None] | None) -> None:
        live: list[_Trial] = []
        try:
            for trial in wave:
                self._create_run(trial)
                live.append(trial)
            env = self.install.environ()
            for trial in live:
                env[trial.token_env] = Path(trial.run["token_file"]).read_text(encoding="utf-8").strip()
            if self.connection == "container":
                overlay.write_text(container_overlay(str(live[0].run["eval_network"])))
            else:
                overlay.write_text(OVERLAY)
            self._drive(live, overlay, env, on_event)
        finally:
            for trial in live:
                if trial.outcome is None:
                    self._finish(trial, HitchError("run_cancelled", "the evaluation ended before this trial did", {}))

    def _drive(
        self, live: list[_Trial], overlay: Path, env: dict[str, str], on_event: Callable[[dict[str, Any]], None] | None
    ) -> None:
        log = (self.dir / "driver.log").open("a", encoding="utf-8")
        proc = subprocess.Popen(
            [str(self.install.python), str(DRIVER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=self.dir,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        events: queue.Queue[dict[str, Any] | None] = queue.Queue()

        def read(out: IO[str]) -> None:
            for line in out:
                with contextlib.suppress(ValueError):
                    events.put(json.loads(line))
            events.put(None)

        reader = threading.Thread(target=read, args=(proc.stdout,), daemon=True)
        reader.start()
        by_name = {t.name: t for t in live}
        with self._stdin_lock:
            self._stdin = proc.stdin
            first = {"trials": [self._spec(t, overlay) for t in live], "sys_path": [str(p) for p in self.options.agent_paths]}
            proc.stdin.write(json.dumps(first) + "\n")
            proc.stdin.flush()
        store = RunStore(self.root)
        try:
            while True:
                try:
                    event = events.get(timeout=1.0)
                except queue.Empty:  # a run cancelled from outside (hitch run cancel): cancel its trial in Harbor
                    for t in live:
                        kept = store.read(t.run_id)
                        if t.result is None and kept is not None and kept.terminal:
                            self.cancel(t.name)
                    continue
                if event is None or event.get("event") == "done":
                    break
                if on_event is not None:
                    on_event(event)
                trial = by_name.get(str(event.get("trial")))
                if event.get("event") == "finished" and trial is not None:
                    trial.result = event
                    self._finish(trial, _trial_error(event))
        except BaseException:
            for t in live:
                if t.result is None:
                    self.cancel(t.name)
            raise
        finally:
            with self._stdin_lock:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
                self._stdin = None
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            reader.join(timeout=10)
            proc.stdout.close()
            log.close()

    def _finish(self, trial: _Trial, error: HitchError | None) -> None:
        status = "completed" if error is None else ("cancelled" if error.code == "run_cancelled" else "failed")
        body: dict[str, Any] = {"status": status}
        if error is not None:
            body["error"] = {"code": error.code, "message": error.message}
        record = self.client.request("POST", f"/v1/runs/{trial.run_id}/finish", body, timeout_s=120.0)["record"]
        trial.outcome = _outcome(self.root, trial, record)


def _trial_error(event: dict[str, Any]) -> HitchError | None:
    if event.get("cancelled"):
        return HitchError("run_cancelled", "the trial was cancelled", {})
    exc = event.get("exception")
    if exc:
        return HitchError("harness_run_failed", f"Harbor trial raised {exc.get('type')}: {str(exc.get('message'))[:500]}", {})
    if event.get("reward") is None:
        return HitchError("harness_run_failed", "the trial ended without a reward", {})
    return None


def _outcome(root: HitchRoot, trial: _Trial, record: dict[str, Any]) -> TrialOutcomeV1:
    result = trial.result or {}
    usage = service = None
    execution = root.runs / trial.run_id / "inference" / "execution.json"
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
    )
