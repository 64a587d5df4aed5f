"""``hitch eval harbor`` end to end: real Harbor (its private venv), real Docker trials, real daemon and gateway,
the fake engine answering ``terminus-2`` with scripted turns.

Needs Harbor installed under ``$HITCH_ROOT`` (``hitch eval harbor install``; ``make harbor``) and the local
base image (``scripts/ci/build_harbor_base_image.py``): without them the tests skip, and fail when
``HITCH_REQUIRE_HARBOR=1`` (``.ci/run``). Each test root links the developer's Harbor install in instead of
installing it again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway.bindings import run_path_prefix
from harness.app.daemon_client import DaemonClient
from harness.contracts.evaluation import EvaluationRecordV1
from harness.evals.harbor_install import HarborInstall, harbor_install
from harness.evals.harbor_run import EvalOptions, HarborEvaluation
from harness.launch.eval_network import eval_network_name
from harness.paths import HitchRoot
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


def _script(tmp_path: Path, turns: int = 16) -> Path:
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


def _trial_containers(eval_id: str) -> list[str]:
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
    argv = ["eval", "harbor", "run", str(CREATE_FILE), "-k", "2", "-n", "2", "--model", "local/tiny", "--device", "cpu",
            "--engine", "fake", "--fake-script", str(_script(tmp_path)), "--eval-id", "ev-share", "--json"]  # fmt: skip
    out = as_json(hitch(inputs.root, *argv))
    record = EvaluationRecordV1.model_validate(out["record"])
    assert Path(out["path"]).is_file() and record.model_connection == "host" and record.agent == "terminus-2"
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
    assert _trial_containers("ev-share") == []


@pytest.mark.parametrize("how", ["api", "run-cancel"])
def test_cancelling_one_trial_leaves_the_other_reward_intact(inputs: ServiceInputs, tmp_path: Path, how: str) -> None:
    """``api``: HarborEvaluation.cancel; ``run-cancel``: ``hitch run cancel`` of the trial's run from outside."""
    root = inputs.root
    body: dict[str, Any] = {"model": "local/tiny", "device": "cpu", "profile": "baseline", "engine": "fake",
                            "launcher": "process", "runtime": "sglang-0.5.23-cpu-generic", "capture": "metadata",
                            "fake_flags": ["--fake-script", str(_script(tmp_path))]}  # fmt: skip
    harbor = harbor_install(root)
    assert harbor is not None
    options = EvalOptions([CREATE_FILE], k=2, n_concurrent=2, evaluation_id=f"ev-{how}", agent_timeout_s=240.0)
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    evaluation = HarborEvaluation(root, harbor, DaemonClient(root), body, options)
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
    assert _trial_containers(f"ev-{how}") == []
    harbor_config = json.loads((evaluation.dir / "trials" / other.trial / "config.json").read_text())
    assert harbor_config["agent"]["override_timeout_sec"] == 240.0  # the agent budget reached Harbor's trial


SHELL_AGENT = "fixtures.harbor_agents.shell_agent:ShellAgent"


def test_an_in_container_agent_reaches_the_model_through_its_container_binding(inputs: ServiceInputs, tmp_path: Path) -> None:
    """The agent's one model call is made from inside the trial container, with the env hitch passed through
    Harbor (OPENAI_BASE_URL on the eval network, the key as ${HITCH_TRIAL_TOKEN_n}); the model's answer
    solves the task there."""
    script = tmp_path / "shell.jsonl"
    # the service's own start-up probes take turns too (as in _script): every turn is the answer
    script.write_text((json.dumps({"text": "echo 'hello from hitch' > /app/hello.txt"}) + "\n") * 16)
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
    assert _trial_containers("ev-inside") == []
