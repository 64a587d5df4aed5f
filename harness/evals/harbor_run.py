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
   Which agents may run at all is :mod:`harness.evals.harbor_agents`' (a passing compatibility profile).
2. One run per trial through the daemon (``POST /v1/runs``), each carrying its trial container's CPU and RAM
   (:mod:`harness.evals.trial_resources`): the first prepares the lock and the service — the daemon first
   checks that the service plus this one trial fit the machine, else nothing starts — and every later one
   pins that ``inference_id`` and leases the same service — one engine, one binding (own token, evidence,
   budget) per trial. At most ``n_concurrent`` trials are being bound or running at once; a trial's run is
   answered once its container's resources are held in the daemon's ledger (it waits its turn there), and
   the trial starts in Harbor at once; each trial that ends makes room for the next. The trial's agent budget
   (``EvalOptions.agent_timeout_s``, else the task's ``[agent] timeout_sec``) is its run's deadline, so no
   model request outlives the trial (:func:`trial_budget_s`).
3. Harbor runs the trials in its own venv (:mod:`harness.evals.harbor_process`, one asyncio task per trial):
   each trial reads its token from its own run's token file. A trial whose run is cancelled (``hitch run
   cancel RUN_ID``, or :meth:`HarborEvaluation.cancel`) is cancelled alone in Harbor.
4. When a trial ends its run is finished (binding revoked, lease and resources released, execution evidence
   written) and the trial's outcome is taken from Harbor's result (reward, timings) and the run's record
   (status — ``failed`` with the engine's code when the engine failed under it, whatever Harbor says:
   :mod:`harness.daemon.run_infra` — requests and tokens as the gateway counted them, the service). A trial
   whose engine failed has no reward and runs again (``infra_retries``, default 1) with the same lock in a
   new run; the failed attempt is kept beside the outcome.
5. ``evals/<id>/evaluation.json`` (:class:`EvaluationRecordV1`).

Resume (``hitch eval harbor resume EVAL``, :meth:`HarborEvaluation.resume`): once its first trial is bound an
evaluation writes ``plan.json`` (:class:`EvaluationPlanV1`: its trial slots, agent, options, run body and the
lock the first run sealed) and, as each trial ends, ``outcomes/<slot>.json``. A resume runs again only the slots
without a terminal result (no outcome, or one ``cancelled`` or ``interrupted``: an evaluation stopped by Ctrl-C, a
daemon that died), each as a new run (``<eval-id>-<task>-<i>-resume<n>``) pinning the plan's lock, and writes
the record with every slot's latest outcome.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from harness.app import progress
from harness.app.daemon_client import DaemonClient
from harness.app.evaluation_store import EvaluationStore
from harness.app.requests import TRIAL_WAIT_S, FinishRunRequest, RunErrorIn, RunRequest, parse_request
from harness.app.run_store import RunStore
from harness.contracts.evaluation import (
    EvaluationPlanV1,
    EvaluationRecordV1,
    TrialOutcomeV1,
    TrialSlotV1,
)
from harness.contracts.run import RunErrorV1
from harness.errors import ENGINE_FAILURE_CODES, HitchError
from harness.evals.harbor_agents import NO_MODEL_AGENTS, agent_artifact
from harness.evals.harbor_install import HarborInstall
from harness.evals.harbor_process import DriverProcess
from harness.evals.harbor_trials import (
    OVERLAY,
    EvalOptions,
    Trial,
    base_image_id,
    container_overlay,
    model_connection,
    task_dirs,
    trial_budget_s,
    trial_error,
    trial_outcome,
)
from harness.evals.harbor_verifier import verifiers_of
from harness.evals.trial_resources import resources_of
from harness.lock import load_sealed_lock
from harness.paths import HitchRoot, ensure_private_dir

__all__ = [
    "OVERLAY",
    "EvalOptions",
    "HarborEvaluation",
    "Trial",
    "base_image_id",
    "model_connection",
    "task_dirs",
    "trial_budget_s",
    "trial_outcome",
]

_EVAL_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
# the options a plan keeps as they are (a resume's options are the plan's: one list for both directions)
_PLANNED = (
    "agent", "k", "n_concurrent", "agent_kwargs", "agent_timeout_s", "infra_retries", "agent_profile_id", "eval_image",
    "require_model_capture",
)  # fmt: skip
_RUN_FIELDS_PINNED = ("engine", "launcher", "runtime", "fake_flags", "image", "capture", "capture_max_bytes")


class HarborEvaluation:
    """One evaluation: its trials, the Harbor driver process, the record."""

    def __init__(
        self,
        root: HitchRoot,
        install: HarborInstall,
        client: DaemonClient,
        request: RunRequest,
        options: EvalOptions,
        *,
        plan: EvaluationPlanV1 | None = None,
    ) -> None:
        if options.k < 1 or options.n_concurrent < 1 or options.infra_retries < 0:
            raise HitchError(
                "usage_error",
                "-k and -n are at least 1, the infrastructure retries at least 0",
                {"k": options.k, "n": options.n_concurrent, "infra_retries": options.infra_retries},
            )
        if options.require_model_capture and request.capture == "off":
            raise HitchError("usage_error", "--require-model-capture needs --model-capture metadata or full", {})
        self.connection = model_connection(options.agent, options.environment)
        # before anything starts: a verifier whose credentials are missing would fail only after the model ran
        self.verifiers = verifiers_of(list(dict.fromkeys(options.tasks)), os.environ)
        self.root, self.install, self.client, self.options = root, install, client, options
        self.request = request
        self.evaluation_id = options.evaluation_id or "eval-" + secrets.token_hex(6)
        if not _EVAL_ID.match(self.evaluation_id):  # it names runs and Harbor's compose projects
            raise HitchError("usage_error", "an evaluation id is 1..40 of [a-z0-9-], starting alphanumeric", {})
        self.evaluations = EvaluationStore(root)
        self.dir = self.evaluations.dir(self.evaluation_id)
        resources = {task: resources_of(task) for task in options.tasks}  # a bad task.toml stops us before anything
        slots = [(task, i) for task in options.tasks for i in range(options.k)]
        self.kept: dict[int, TrialOutcomeV1] = {}  # the slots whose outcome a resume keeps
        self.resumed = 0
        suffix = ""
        if plan is not None:
            self.kept = self.evaluations.kept_outcomes(self.evaluation_id, len(slots))
            self.resumed = _resumes(root, self.evaluation_id) + 1
            suffix = f"-resume{self.resumed}"
        self.trials = [
            Trial(
                f"{self.evaluation_id}-{task.name}-{i}{suffix}",
                task.resolve(),
                f"{self.evaluation_id}-{task.name}-{i}{suffix}",
                f"HITCH_TRIAL_TOKEN_{n}",
                resources[task],
                slot=n,
            )
            for n, (task, i) in enumerate(slots)
            if n not in self.kept
        ]
        used = [t.run_id for t in self.trials if RunStore(root).path(t.run_id).exists()]
        if (plan is None and self.evaluations.path(self.evaluation_id).exists()) or used:
            raise HitchError(
                "run_conflict",
                f"evaluation id {self.evaluation_id} was used before (its trials' runs exist); give another --eval-id",
                {"evaluation_id": self.evaluation_id, "runs": used[:5]},
            )
        self._first = {t.slot: t for t in self.trials}  # the first attempt of each trial
        self._final = dict(self._first)  # the latest attempt of each trial
        self._tokens = len(slots)  # token variable names used so far (one per attempt)
        self.inference_id: str | None = request.inference_id or (plan.inference_id if plan is not None else None)
        self.plan = plan or self._new_plan([(task.resolve(), i) for task, i in slots])
        self.eval_image = (options.eval_image or base_image_id()) if self.connection == "container" else None
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._driver: DriverProcess | None = None
        self._aborted = threading.Event()

    @classmethod
    def resume(cls, root: HitchRoot, install: HarborInstall, client: DaemonClient, evaluation_id: str) -> HarborEvaluation:
        """The evaluation ``evaluation_id`` set to run again its slots without a terminal result, on its lock."""
        plan = EvaluationStore(root).read_plan(evaluation_id)
        options = EvalOptions(
            tasks=[Path(s.task) for s in plan.slots if s.attempt == 0],
            environment=plan.environment,
            evaluation_id=plan.evaluation_id,
            agent_paths=[Path(p) for p in plan.agent_paths],
            **{name: getattr(plan, name) for name in _PLANNED},
        )
        body = dict(plan.run_body)
        if plan.inference_id is not None:  # the same lock: sealed in this root, else refused before anything starts
            load_sealed_lock(root, plan.inference_id)
            body["inference_id"] = plan.inference_id
        return cls(root, install, client, parse_request(RunRequest, body), options, plan=plan)

    def _new_plan(self, slots: list[tuple[Path, int]]) -> EvaluationPlanV1:
        o = self.options
        return EvaluationPlanV1(
            evaluation_id=self.evaluation_id,
            environment="docker",
            agent_paths=[str(p) for p in o.agent_paths],
            **{name: getattr(o, name) for name in _PLANNED},
            run_body={k: v for k, v in self.request.body().items() if k not in ("run_id", "harness")},
            inference_id=self.inference_id,
            slots=[TrialSlotV1(slot=n, task=str(task), attempt=i) for n, (task, i) in enumerate(slots)],
            created_at=time.time(),
        )

    def _save_plan(self) -> None:
        if self.plan.inference_id != self.inference_id:
            self.plan = EvaluationPlanV1.model_validate({**self.plan.to_json_dict(), "inference_id": self.inference_id})
        self.evaluations.write_plan(self.plan)

    @property
    def pending(self) -> list[str]:
        """The trials this evaluation (or resume) will run."""
        return [t.name for t in self.trials]

    # -- public ----------------------------------------------------------------------------------------

    def cancel(self, trial: str) -> bool:
        """Cancel one live trial in Harbor (its run then ends ``cancelled``); False when it is not live."""
        driver = self._driver
        return driver is not None and driver.cancel(trial)

    def run(self, on_event: Callable[[dict[str, Any]], None] | None = None) -> EvaluationRecordV1:
        started = time.time()
        paths = [str(p) for p in self.options.agent_paths]
        self._driver = DriverProcess(self.install, self.dir, paths, self._events)
        pending: deque[Trial] = deque(self.trials)
        binding: dict[str, Trial] = {}
        live: dict[str, Trial] = {}
        failed_closed: HitchError | None = None
        try:
            while pending or binding or live:
                self._bind_more(pending, binding, live)
                try:
                    event = self._events.get(timeout=1.0)
                except queue.Empty:
                    self._follow_outside_cancels(live)
                    continue
                kind, name = event.get("event"), str(event.get("trial"))
                if kind == "bound":
                    self._bound(binding.pop(name), event, live)
                elif kind == "driver_exit":
                    raise HitchError("harness_run_failed", "Harbor's driver ended before its trials (see driver.log)", {})
                else:
                    if on_event is not None:
                        on_event(event)
                    trial = live.get(name)
                    if kind == "finished" and trial is not None:
                        del live[name]
                        trial.result = event
                        self._finish(trial, trial_error(event))
                        failed_closed = self._capture_failure(trial)
                        if failed_closed is not None:  # fail closed: no trial starts after it, live ones end
                            self._abort(binding, live)
                            break
                        retry = self._retry_of(trial)
                        if retry is not None:
                            pending.appendleft(retry)
        except BaseException:
            self._abort(binding, live)
            raise
        finally:
            self._driver.close()
        ran = {t.slot: self._outcome_of(self._final[t.slot]) for t in self.trials if self._final[t.slot].outcome is not None}
        latest = self.kept | ran
        record = EvaluationRecordV1(
            evaluation_id=self.evaluation_id,
            tool_version=str(self.install.versions.get("harbor", "unknown")),
            agent=self.options.agent,
            model_connection=self.connection,
            environment="docker",
            inference_id=self.inference_id,
            engine=self.request.engine,
            agent_profile_id=self.options.agent_profile_id,
            infrastructure_retries=self.options.infra_retries,
            started_at=started,
            finished_at=time.time(),
            trials=[latest[slot] for slot in sorted(latest)],
            resumed=self.resumed,
            model_capture=self.request.capture,
            verifiers=self.verifiers,
            offline=all(v.locality == "local" for v in self.verifiers),
            require_model_capture=self.options.require_model_capture,
            error=RunErrorV1(code=failed_closed.code, message=failed_closed.message) if failed_closed is not None else None,
        )
        self.evaluations.write(record)
        if failed_closed is not None:
            raise HitchError(failed_closed.code, failed_closed.message, {**failed_closed.details, "evaluation": str(self.dir)})
        return record

    def _capture_failure(self, trial: Trial) -> HitchError | None:
        """Under ``require_model_capture``: the error that ends the evaluation when ``trial``'s run reached the model
        and its capture (the run's evidence) is not complete; else None."""
        usage = trial.outcome.usage if trial.outcome is not None else None
        if not self.options.require_model_capture or usage is None or usage.evidence_complete:
            return None
        return HitchError(
            "inference_capture_incomplete",
            f"trial {trial.name}'s model capture ({self.request.capture}) is incomplete and --require-model-capture is set: "
            "the evaluation failed closed (no later trial started)",
            {"trial": trial.name, "run_id": trial.run_id, "capture": self.request.capture},
        )

    # -- binding runs --------------------------------------------------------------------------------------

    def _bind_more(self, pending: deque[Trial], binding: dict[str, Trial], live: dict[str, Trial]) -> None:
        """Bind runs for the next trials while fewer than ``n_concurrent`` are being bound or running; the
        first run prepares the lock, so until its inference id is known it is the only one."""
        while pending and len(binding) + len(live) < self.options.n_concurrent:
            if self.inference_id is None and binding:
                return
            trial = pending.popleft()
            binding[trial.name] = trial
            threading.Thread(target=self._bind_in_background, args=(trial,), daemon=True).start()

    def _bind_in_background(self, trial: Trial) -> None:
        try:
            if self._aborted.is_set():
                raise HitchError("run_cancelled", "the evaluation ended before this trial's run was created", {})
            run = self._create_run(trial)
        except BaseException as exc:
            self._events.put({"event": "bound", "trial": trial.name, "error": exc})
            return
        if self._aborted.is_set():  # bound after the evaluation ended: end it here, nobody else will
            with contextlib.suppress(HitchError):
                self.client.cancel_run(trial.run_id)
        self._events.put({"event": "bound", "trial": trial.name, "run": run})

    def _create_run(self, trial: Trial) -> dict[str, Any]:
        given = self.request.body()
        if self.inference_id is None:
            body = given
        else:  # the lock and service are prepared: every later trial pins them
            body = {k: given[k] for k in _RUN_FIELDS_PINNED if k in given} | {"inference_id": self.inference_id}
        body.update(
            run_id=trial.run_id,
            harness=f"harbor:{self.options.agent}",
            trial=trial.resources.to_json_dict(),
            submission={"task": str(trial.task), "agent_kwargs": self.options.agent_kwargs, "attempt": trial.attempt},
            # spec §8.3: an evaluation's trials share one service (and, under a radix-cache lock, its cache), never
            # another evaluation's
            cache_scope_owner=self.evaluation_id,
        )
        if self.options.certifying:
            body["certifying"] = True
        elif self.options.agent not in NO_MODEL_AGENTS:  # the daemon admits the run by this artifact's profile
            harbor_version = str(self.install.versions.get("harbor", "unknown"))
            claim = agent_artifact(self.options.agent, harbor_version, self.options.agent_paths)
            body["harness_artifact"] = claim.model_dump(mode="json")
        budget = trial_budget_s(trial.task, self.options.agent_timeout_s)
        if budget is not None:
            body["deadline_s"] = budget
        if self.eval_image is not None:
            body.update(for_containers=True, eval_image=self.eval_image)
        # answered once the service is ready and the trial's resources are held: it may wait its turn that long
        with progress.watch(self.root, trial.run_id):  # a cold start's phases on stderr (silent once warm)
            run = self.client.create_run(parse_request(RunRequest, body), timeout_s=TRIAL_WAIT_S + 900.0)
        if run.get("existing"):
            raise HitchError("run_conflict", f"run {trial.run_id} already ran; give another --eval-id", {"run_id": trial.run_id})
        return run

    def _bound(self, trial: Trial, event: dict[str, Any], live: dict[str, Trial]) -> None:
        error = event.get("error")
        if isinstance(error, HitchError) and error.code == "run_cancelled" and not self._aborted.is_set():
            # its run was cancelled from outside while it was bound (waiting for its resources): that trial ends
            record = self.client.run_record(trial.run_id)["record"]
            trial.outcome = trial_outcome(self.root, trial, record)
            return
        if error is not None:
            raise error
        trial.run = event["run"]
        self.inference_id = str(trial.run["inference_id"])
        live[trial.name] = trial
        ensure_private_dir(self.dir)  # from the first bound trial on: nothing is written for a refused evaluation
        if self.plan.inference_id != self.inference_id or not self.evaluations.plan_path(self.evaluation_id).exists():
            self._save_plan()  # the lock a resume pins
        assert self._driver is not None
        if not self._driver.start_trial(self._spec(trial)):
            raise HitchError("harness_run_failed", "Harbor's driver takes no more trials (see driver.log)", {})

    def _overlay(self, trial: Trial) -> Path:
        overlay = self.dir / "overlay.compose.yaml"
        if not overlay.exists():
            text = container_overlay(str(trial.run["eval_network"])) if self.connection == "container" else OVERLAY
            overlay.write_text(text)
        return overlay

    def _spec(self, trial: Trial) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": trial.name,
            "task_path": str(trial.task),
            "trials_dir": str(self.dir / "trials"),
            "agent": self.options.agent,
            "model_name": f"openai/{trial.run['wire_model']}",
            "agent_kwargs": self.options.agent_kwargs,
            "agent_timeout_s": self.options.agent_timeout_s,
            "overlays": [str(self._overlay(trial))],
            "token_env": trial.token_env,
            "token_file": trial.run["token_file"],
            "cpus": trial.resources.cpus,
            "memory_mb": trial.resources.memory_mb,
        }
        if self.connection == "container":  # Harbor resolves ${VAR} from its own environment: no key on stdin
            spec["env"] = {"OPENAI_BASE_URL": trial.run["base_url"], "OPENAI_API_KEY": f"${{{trial.token_env}}}"}
        else:
            spec["base_url"] = trial.run["base_url"]
        return spec

    # -- trials ending ---------------------------------------------------------------------------------------

    def _follow_outside_cancels(self, live: dict[str, Trial]) -> None:
        """A run cancelled from outside (``hitch run cancel``): cancel its trial in Harbor."""
        store = RunStore(self.root)
        for trial in live.values():
            kept = store.read(trial.run_id)
            if trial.result is None and kept is not None and kept.terminal:
                self.cancel(trial.name)

    def _finish(self, trial: Trial, error: HitchError | None) -> None:
        status: Literal["completed", "failed", "cancelled"] = (
            "completed" if error is None else ("cancelled" if error.code == "run_cancelled" else "failed")
        )
        finish = FinishRunRequest(
            status=status, error=RunErrorIn(code=error.code, message=error.message) if error is not None else None
        )
        record = self.client.finish_run(trial.run_id, finish)["record"]
        trial.outcome = trial_outcome(self.root, trial, record)
        self.evaluations.write_outcome(self.evaluation_id, trial.slot, self._outcome_of(trial))

    def _retry_of(self, trial: Trial) -> Trial | None:
        """The next attempt of a trial whose engine failed, while retries are left; else None."""
        out = trial.outcome
        if out is None or out.error is None or out.error.code not in ENGINE_FAILURE_CODES:
            return None
        if trial.attempt >= self.options.infra_retries:
            return None
        first = self._first[trial.slot]
        attempt = trial.attempt + 1
        retry = Trial(
            f"{first.name}-r{attempt}",
            trial.task,
            f"{first.run_id}-r{attempt}",
            f"HITCH_TRIAL_TOKEN_{self._tokens}",
            trial.resources,
            slot=trial.slot,
            attempt=attempt,
            earlier=[*trial.earlier, out],
        )
        self._tokens += 1
        self._final[trial.slot] = retry
        return retry

    def _outcome_of(self, trial: Trial) -> TrialOutcomeV1:
        assert trial.outcome is not None
        return TrialOutcomeV1.model_validate({**trial.outcome.model_dump(), "attempts": [a.model_dump() for a in trial.earlier]})

    def _abort(self, binding: dict[str, Trial], live: dict[str, Trial]) -> None:
        """The evaluation is ending early: every live trial is cancelled in Harbor and its run ended
        ``cancelled``; a run still being bound is cancelled in the daemon (its wait for resources ends)."""
        self._aborted.set()
        for trial in live.values():
            if trial.result is None:
                self.cancel(trial.name)
        for trial in binding.values():
            with contextlib.suppress(HitchError):
                self.client.cancel_run(trial.run_id)
        if self._driver is not None:
            self._driver.close()
        for trial in live.values():
            if trial.outcome is None:
                with contextlib.suppress(HitchError):
                    self._finish(trial, HitchError("run_cancelled", "the evaluation ended before this trial did", {}))


def _resumes(root: HitchRoot, evaluation_id: str) -> int:
    """How many resumes made runs (an interrupted resume too): the next one's runs get new ids."""
    pattern = re.compile(re.escape(evaluation_id) + r"-.+-resume(\d+)(-r\d+)?$")
    found = [int(m.group(1)) for p in root.runs.glob(f"{evaluation_id}-*") if (m := pattern.match(p.name))]
    return max(found, default=0)
