"""``hitch eval harbor`` end to end: real Harbor (its private venv), real Docker trials, real daemon and gateway,
the fake engine answering ``terminus-2`` with scripted turns.

Needs Harbor installed under ``$HITCH_ROOT`` (``hitch eval harbor install``; ``make harbor``) and the local
base image (``scripts/ci/build_harbor_base_image.py``): without them the tests skip, and fail when
``HITCH_REQUIRE_HARBOR=1`` (``.ci/run``). Each test root links the developer's Harbor install in instead of
installing it again, and records the agent's passing compatibility profile for the fake engine as
``pytest certify -k agents.harbor`` would (``hitch eval harbor run`` admits no agent without one).

Resources and failures: trials beyond what the machine holds wait their turn, their reservations shown by ``hitch local
status``; an engine killed under a trial fails that attempt for infrastructure (no reward) and the trial runs
again on a new service epoch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest

from gateway.bindings import run_path_prefix
from harness.app.daemon_client import DaemonClient
from harness.app.requests import RunRequest, parse_request
from harness.contracts.evaluation import EvaluationRecordV1
from harness.errors import ENGINE_FAILURE_CODES
from harness.evals.harbor_agents import SHELL_AGENT, TERMINUS, agent_key, record_agent_result
from harness.evals.harbor_install import HarborInstall, harbor_install
from harness.evals.harbor_run import EvalOptions, HarborEvaluation
from harness.evals.trial_resources import DEFAULT_MEMORY_MB
from harness.launch.eval_network import eval_network_name
from harness.paths import HitchRoot
from harness.runtimes import default_runtime
from harness.service.ledger import demand_of
from harness.store import resolve_model
from tests.components import missing
from tests.harness.daemon.conftest import FAST, as_json, hitch, stop_quietly
from tests.harness.docker_support import docker_client_or_skip
from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
CREATE_FILE = REPO / "fixtures" / "harbor_tasks" / "create-file"
BASE_IMAGE = "hitch/harbor-base:dev"
# terminus-2's JSON answer: the command that solves create-file, marked complete; terminus asks for a
# confirmation and the same answer confirms it. Every turn is the same, so trials sharing the fake engine's
# one script may take turns in any order.
_TURN = {
    "analysis": "The file does not exist yet.",
    "plan": "Write the line into /app/hello.txt.",
    "commands": [{"keystrokes": "echo 'hello from hitch' > /app/hello.txt\n", "duration": 0.3}],
    "task_complete": True,
}


@pytest.fixture(scope="module")
def harbor() -> HarborInstall:
    found = harbor_install(HitchRoot.at())
    if found is None:
        missing("harbor", "Harbor is not installed under $HITCH_ROOT (hitch eval harbor install)")
    client = docker_client_or_skip()
    try:
        if not client.images.list(name=BASE_IMAGE):
            missing("harbor", f"{BASE_IMAGE} is not built (scripts/ci/build_harbor_base_image.py)")
    finally:
        client.close()
    return found


@pytest.fixture
def inputs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, harbor: HarborInstall) -> Iterator[ServiceInputs]:
    made = service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))
    tools = made.root.path / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "harbor").symlink_to(harbor.path.parent, target_is_directory=True)
    yield made
    stop_quietly(made.root)


def certified_agent(root: HitchRoot, agent: str) -> None:
    """The agent's passing profile for the fake engine on this runtime and model, as the certification records it."""
    harbor = harbor_install(root)
    assert harbor is not None
    model_id = resolve_model(root, "local/tiny").model_id
    runtime_id = default_runtime("cpu").runtime_id  # what `--engine fake --device cpu` names
    key = agent_key(agent, str(harbor.versions["harbor"]), runtime_id, model_id, [REPO])
    record_agent_result(root, agent, key, "agents.harbor.shared_service", "fake", "cpu", True)


def scripted_turns(tmp_path: Path, turns: int = 16) -> Path:
    path = tmp_path / "terminus.jsonl"
    path.write_text("".join(json.dumps({"text": json.dumps(_TURN)}) + "\n" for _ in range(turns)))
    return path


def _eval_gateway_ip(root: HitchRoot) -> str:
    client = docker_client_or_skip()
    try:
        attrs = client.api.inspect_network(eval_network_name(root.path))
        return str(next(c["Gateway"] for c in attrs["IPAM"]["Config"] if ":" not in c["Subnet"]))
    finally:
        client.close()


def trial_containers(eval_id: str) -> list[str]:
    client = docker_client_or_skip()
    try:
        return [
            c.name
            for c in client.containers.list(all=True)
            if str(c.labels.get("com.docker.compose.project", "")).startswith(eval_id)
        ]
    finally:
        client.close()


def test_two_trials_at_once_share_one_service_and_both_solve_the_task(inputs: ServiceInputs, tmp_path: Path) -> None:
    certified_agent(inputs.root, TERMINUS)
    argv = ["eval", "harbor", "run", str(CREATE_FILE), "-k", "2", "-n", "2", "--model", "local/tiny", "--device", "cpu",
            "--engine", "fake", "--fake-script", str(scripted_turns(tmp_path)), "--eval-id", "ev-share", "--json"]  # fmt: skip
    out = as_json(hitch(inputs.root, *argv))
    record = EvaluationRecordV1.model_validate(out["record"])
    assert Path(out["path"]).is_file() and record.model_connection == "host" and record.agent == "terminus-2"
    assert record.agent_profile_id is not None and record.infrastructure_retries == 1
    assert [t.status for t in record.trials] == ["completed", "completed"]
    assert [t.reward for t in record.trials] == [1.0, 1.0]
    services = {(t.service.service_id, t.service.epoch) for t in record.trials if t.service is not None}
    assert len(services) == 1, "both trials are served by one service, started once"
    assert sorted(t.service.reused_service for t in record.trials if t.service is not None) == [False, True]
    assert len({t.binding_id for t in record.trials}) == 2 and len({t.run_id for t in record.trials}) == 2
    for trial in record.trials:
        assert trial.usage is not None and trial.usage.requests >= 2 and trial.usage.evidence_complete
        assert trial.usage.input_tokens > 0 and trial.usage.output_tokens > 0
        run = json.loads((inputs.root.runs / trial.run_id / "run.json").read_text())
        assert run["status"] == "completed" and run["binding_id"] == trial.binding_id
    assert trial_containers("ev-share") == []


@pytest.mark.parametrize("how", ["api", "run-cancel"])
def test_cancelling_one_trial_leaves_the_other_reward_intact(inputs: ServiceInputs, tmp_path: Path, how: str) -> None:
    """``api``: HarborEvaluation.cancel; ``run-cancel``: ``hitch run cancel`` of the trial's run from outside."""
    root = inputs.root
    body: dict[str, Any] = {"model": "local/tiny", "device": "cpu", "profile": "baseline", "engine": "fake",
                            "launcher": "process", "runtime": "sglang-0.5.23-cpu-generic", "capture": "metadata",
                            "fake_flags": ["--fake-script", str(scripted_turns(tmp_path))]}  # fmt: skip
    harbor = harbor_install(root)
    assert harbor is not None
    certified_agent(root, TERMINUS)  # the daemon admits each trial's run by the agent's profile
    options = EvalOptions([CREATE_FILE], k=2, n_concurrent=2, evaluation_id=f"ev-{how}", agent_timeout_s=240.0)
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    evaluation = HarborEvaluation(root, harbor, DaemonClient(root), parse_request(RunRequest, body), options)
    victim = evaluation.trials[0].name

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") != "started" or event.get("trial") != victim:
            return
        if how == "api":
            assert evaluation.cancel(victim)
        else:
            as_json(hitch(root, "run", "cancel", evaluation.trials[0].run_id, "--json"))

    record = evaluation.run(on_event)
    cancelled, other = record.trials
    assert cancelled.trial == victim and cancelled.status == "cancelled" and cancelled.reward is None
    assert cancelled.error is not None and cancelled.error.code == "run_cancelled"
    assert other.status == "completed" and other.reward == 1.0 and other.error is None
    assert other.usage is not None and other.usage.requests >= 2
    assert json.loads((root.runs / cancelled.run_id / "run.json").read_text())["status"] == "cancelled"
    assert trial_containers(f"ev-{how}") == []
    harbor_config = json.loads((evaluation.dir / "trials" / other.trial / "config.json").read_text())
    assert harbor_config["agent"]["override_timeout_sec"] == 240.0  # the agent budget reached Harbor's trial


def test_an_in_container_agent_reaches_the_model_through_its_container_binding(inputs: ServiceInputs, tmp_path: Path) -> None:
    """The agent's one model call is made from inside the trial container, with the env hitch passed through
    Harbor (OPENAI_BASE_URL on the eval network, the key as ${HITCH_TRIAL_TOKEN_n}); the model's answer
    solves the task there."""
    script = tmp_path / "shell.jsonl"
    # the service's own start-up probes take turns too (as in scripted_turns): every turn is the answer
    script.write_text((json.dumps({"text": "echo 'hello from hitch' > /app/hello.txt"}) + "\n") * 16)
    certified_agent(inputs.root, SHELL_AGENT)
    argv = ["eval", "harbor", "run", str(CREATE_FILE), "-k", "1", "-n", "1", "--model", "local/tiny", "--device", "cpu",
            "--engine", "fake", "--fake-script", str(script), "--agent", SHELL_AGENT, "--agent-path", str(REPO),
            "--eval-id", "ev-inside", "--json"]  # fmt: skip
    out = as_json(hitch(inputs.root, *argv))
    record = EvaluationRecordV1.model_validate(out["record"])
    assert record.model_connection == "container"
    (trial,) = record.trials
    assert (trial.status, trial.reward, trial.error) == ("completed", 1.0, None)
    assert trial.usage is not None and trial.usage.requests == 1 and trial.usage.evidence_complete
    timing = trial.timing
    assert timing is not None and None not in (timing.environment_setup_s, timing.agent_execution_s, timing.verifier_s)
    assert timing.teardown_s is not None and timing.total_s is not None and 0 <= timing.teardown_s < timing.total_s
    trial_dir = Path(out["path"]).parent / "trials" / trial.trial
    probe = json.loads((trial_dir / "agent" / "probe.json").read_text())
    assert probe["status"] == 200 and probe["command"] == "echo 'hello from hitch' > /app/hello.txt"
    env = json.loads((trial_dir / "config.json").read_text())["agent"]["env"]
    assert env["OPENAI_API_KEY"] == "${HITCH_TRIAL_TOKEN_0}", "the key is resolved by Harbor, never written down"
    base = urlsplit(env["OPENAI_BASE_URL"])
    assert base.hostname == _eval_gateway_ip(inputs.root) and base.path.startswith(run_path_prefix(str(trial.binding_id)))
    assert trial_containers("ev-inside") == []


def _fake_body(script: Path) -> RunRequest:
    return parse_request(RunRequest, {
        "model": "local/tiny", "device": "cpu", "profile": "baseline", "engine": "fake", "launcher": "process",
        "runtime": default_runtime("cpu").runtime_id, "capture": "metadata", "fake_flags": ["--fake-script", str(script)],
    })  # fmt: skip


def _service_demand(root: HitchRoot) -> int:
    """The RAM the daemon holds for the fake service of local/tiny (its draft lock's, as the daemon builds it)."""
    from harness.devices import probe_cpu
    from harness.lock import build_lock

    lock = build_lock(resolve_model(root, "local/tiny"), default_runtime("cpu"), device="cpu", profile="baseline",
                      cpu_cores_per_node=probe_cpu().cores_per_node)  # fmt: skip
    return demand_of(lock.resources).memory_bytes


def test_trials_beyond_the_machine_wait_their_turn_and_their_reservations_show_in_status(
    inputs: ServiceInputs, tmp_path: Path
) -> None:
    """The daemon is told the RAM holds the service and one trial's 2 GiB, not two: with -n 3 the second trial's
    run is answered only once the first trial's container is gone, and each trial's reservation is in
    ``hitch local status --json`` while it runs. The third, cancelled (``hitch run cancel``) while it waits its
    turn, ends ``cancelled`` alone: its wait ends, the others go on."""
    root = inputs.root
    room_for_one = _service_demand(root) + (DEFAULT_MEMORY_MB + DEFAULT_MEMORY_MB // 2) * (1 << 20)
    as_json(hitch(root, "daemon", "start", "--json", *FAST, "--capacity-memory", str(room_for_one)))
    harbor = harbor_install(root)
    assert harbor is not None
    certified_agent(root, TERMINUS)  # the daemon admits each trial's run by the agent's profile
    options = EvalOptions([CREATE_FILE], k=3, n_concurrent=3, evaluation_id="ev-turns")
    evaluation = HarborEvaluation(root, harbor, DaemonClient(root), _fake_body(scripted_turns(tmp_path, 48)), options)
    waiting = evaluation.trials[2].run_id
    seen: dict[str, list[dict[str, Any]]] = {}

    def preparing(run_id: str) -> bool:
        path = root.runs / run_id / "run.json"
        return path.is_file() and json.loads(path.read_text())["status"] == "preparing"

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "started":
            status = as_json(hitch(root, "local", "status", "--json"))
            seen[str(event["trial"])] = [h for h in status["resources"]["holders"] if h["kind"] == "trial"]
            if len(seen) == 1:  # the first trial runs; the other two wait for its RAM: cancel the last one's run
                deadline = time.monotonic() + 120
                while not preparing(waiting) and time.monotonic() < deadline:
                    time.sleep(0.05)
                as_json(hitch(root, "run", "cancel", waiting, "--json"))

    record = evaluation.run(on_event)
    cancelled = record.trials.pop()
    assert (cancelled.run_id, cancelled.status, cancelled.reward) == (waiting, "cancelled", None)
    assert cancelled.error is not None and cancelled.error.code == "run_cancelled" and cancelled.usage is None
    assert [(t.status, t.reward) for t in record.trials] == [("completed", 1.0), ("completed", 1.0)]
    assert sorted(seen) == sorted(t.trial for t in record.trials)
    for trial, holders in seen.items():  # each trial's own reservation, and never two trials at once
        assert [h["run_id"] for h in holders] == [trial], holders
        assert holders[0]["held"]["memory_bytes"] == DEFAULT_MEMORY_MB << 20 and holders[0]["held"]["cpu_quota_millis"] == 1000
    assert all(
        t.resources is not None and (t.resources.cpus, t.resources.memory_mb) == (1.0, DEFAULT_MEMORY_MB) for t in record.trials
    )
    runs = sorted(
        (json.loads((root.runs / t.run_id / "run.json").read_text()) for t in record.trials), key=lambda r: r["admitted_at"]
    )
    running_at = {r["run_id"]: next(h["at"] for h in r["history"] if h["status"] == "running") for r in runs}
    assert running_at[runs[1]["run_id"]] >= runs[0]["finished_at"], "the second trial ran only after the first ended"
    after = as_json(hitch(root, "local", "status", "--json"))["resources"]
    assert [h for h in after["holders"] if h["kind"] == "trial"] == [] and after["used"]["cpu_quota_millis"] == 0
    assert trial_containers("ev-turns") == []


def test_an_engine_killed_under_a_trial_fails_that_attempt_and_the_trial_runs_again(
    inputs: ServiceInputs, tmp_path: Path
) -> None:
    """The engine is killed as the trial starts: that attempt ends ``failed`` with the engine's code and no
    reward (never 0); the trial runs again with the same lock in a new run on a new service epoch and solves
    the task; the failed attempt's run and Harbor trial stay beside it."""
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    harbor = harbor_install(root)
    assert harbor is not None
    certified_agent(root, TERMINUS)  # the daemon admits each trial's run by the agent's profile
    options = EvalOptions([CREATE_FILE], k=1, n_concurrent=1, evaluation_id="ev-crash", agent_timeout_s=240.0)
    evaluation = HarborEvaluation(root, harbor, DaemonClient(root), _fake_body(scripted_turns(tmp_path, 32)), options)
    killed: list[int] = []

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "started" and not killed:
            (service,) = DaemonClient(root).services()["services"]
            psutil.Process(service["pid"]).kill()
            killed.append(int(service["epoch"]))

    record = evaluation.run(on_event)
    (trial,) = record.trials
    assert (trial.status, trial.reward, trial.error) == ("completed", 1.0, None)
    (failed,) = trial.attempts
    assert failed.status == "failed" and failed.reward is None and failed.rewards is None
    assert failed.error is not None and failed.error.code in ENGINE_FAILURE_CODES, failed.error
    assert failed.run_id != trial.run_id and failed.binding_id != trial.binding_id
    assert failed.service is not None and trial.service is not None
    assert failed.service.inference_id == trial.service.inference_id == record.inference_id  # the same lock
    assert failed.service.epoch == killed[0] < trial.service.epoch  # a new epoch of the same service
    kept = json.loads((root.runs / failed.run_id / "run.json").read_text())
    assert kept["status"] == "failed" and kept["error"]["code"] == failed.error.code
    assert (root.runs / failed.run_id / "inference" / "execution.json").is_file()
    assert (evaluation.dir / "trials" / failed.trial).is_dir() and (evaluation.dir / "trials" / trial.trial).is_dir()
    assert trial_containers("ev-crash") == []
