"""What ``hitch eval harbor run`` admits before anything starts: agents with a passing compatibility profile
(spec §3, §10.3) and a service plus one trial that fit the machine (§8.2); an engine failure is never a
reward (§9.2).

The refusals need no Harbor: a root gets a Harbor install's layout (``installed.json`` for this lock, never
executed) and the tiny checkpoint, and the command must stop before a daemon, a service or a container exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.app.daemon_client import DaemonClient
from harness.contracts.run import RunErrorV1
from harness.errors import ERROR_TABLE, HitchError
from harness.evals.harbor_agents import SHELL_AGENT, TERMINUS, agent_key, record_agent_result, require_agent
from harness.evals.harbor_install import requirements_digest
from harness.evals.harbor_run import Trial, task_dirs, trial_outcome
from harness.evals.trial_resources import DEFAULT_CPUS, DEFAULT_MEMORY_MB, resources_of
from harness.paths import HitchRoot
from harness.runtimes import default_runtime
from harness.service.ledger import demand_of
from harness.store import resolve_model
from tests.harness.daemon.conftest import FAST, as_json, hitch, stop_quietly
from tests.harness.engine.inputs import checkpoint_cache, service_inputs

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "fixtures" / "harbor_tasks"
HARBOR_VERSION = "0.25.0"
RUNTIME_ID = default_runtime("cpu").runtime_id  # what `--engine fake --device cpu` names
MODEL_A = "sha256:" + "a" * 64


@pytest.fixture
def root(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HitchRoot]:
    made = service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))
    folder = made.root.tool_envs / "harbor" / requirements_digest()[:32]
    (folder / "venv" / "bin").mkdir(parents=True)
    (folder / "venv" / "bin" / "python").write_text("")
    plugin = folder / "docker-config" / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("")
    (folder / "installed.json").write_text(
        json.dumps({"lock_digest": requirements_digest(), "versions": {"harbor": HARBOR_VERSION}})
    )
    yield made.root
    stop_quietly(made.root)


def _eval(root: HitchRoot, *extra: str) -> dict[str, Any]:
    out = hitch(root, "eval", "harbor", "run", str(TASKS), "--model", "local/tiny", "--engine", "fake", "--device", "cpu",
                "--eval-id", "ev-adm", *extra, "--json")  # fmt: skip
    assert out.returncode != 0, out.stdout
    error: dict[str, Any] = json.loads(out.stdout)["error"]
    assert out.returncode == ERROR_TABLE[error["code"]].exit_code
    return error


def _nothing_started(root: HitchRoot) -> None:
    assert not (root.path / "evals").exists() and not root.runs.exists()
    assert not (root.path / "inference" / "daemon" / "daemon.sock").exists()


def harbor_agent_key(root: HitchRoot, agent: str) -> Any:
    model_id = resolve_model(root, "local/tiny").model_id
    return agent_key(agent, HARBOR_VERSION, RUNTIME_ID, model_id, [REPO])


# -- agents -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", ["codex", "claude-code", "mini-swe-agent", "mypkg.agents:Mine"])
def test_an_agent_no_profile_can_exist_for_is_refused_before_anything_starts(tmp_path: Path, agent: str) -> None:
    root = HitchRoot(tmp_path / "empty")
    error = _eval(root, "--agent", agent)
    assert error["code"] == "inference_harness_unsupported" and error["details"]["agent"] == agent
    assert TERMINUS in error["details"]["profiled_agents"]
    assert not root.path.exists() or not any(root.path.iterdir())


@pytest.mark.parametrize(("agent", "paths"), [(TERMINUS, []), (SHELL_AGENT, ["--agent-path", str(REPO)])])
def test_a_known_agent_without_a_passing_profile_for_the_engine_is_refused_before_anything_starts(
    root: HitchRoot, agent: str, paths: list[str]
) -> None:
    error = _eval(root, "--agent", agent, *paths)
    assert error["code"] == "inference_harness_unsupported" and "no certified compatibility profile" in error["message"]
    _nothing_started(root)
    key = harbor_agent_key(root, agent)
    record_agent_result(root, agent, key, "agents.harbor.shared_service", "sglang", "cpu", True)
    error = _eval(root, "--agent", agent, *paths)  # certified on real SGLang, not on the fake engine this asks for
    assert error["code"] == "inference_harness_unsupported" and error["details"]["engine"] == "fake"
    record_agent_result(root, agent, key, "agents.harbor.shared_service", "fake", "cpu", False)
    error = _eval(root, "--agent", agent, *paths)
    assert error["code"] == "inference_harness_unsupported" and error["details"]["failed"] == ["agents.harbor.shared_service"]
    _nothing_started(root)


def test_a_module_agent_is_its_code_an_edited_one_needs_certifying_again(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    (folder / "fixtures" / "harbor_agents").mkdir(parents=True)
    module = folder / "fixtures" / "harbor_agents" / "shell_agent.py"
    module.write_text((REPO / "fixtures" / "harbor_agents" / "shell_agent.py").read_text())
    root = HitchRoot(tmp_path / "root")
    key = agent_key(SHELL_AGENT, HARBOR_VERSION, RUNTIME_ID, MODEL_A, [folder])
    assert key.harness == "harbor-agent" and key.protocol == "chat-completions" and key.artifact.startswith("harbor@0.25.0:")
    assert key == agent_key(SHELL_AGENT, HARBOR_VERSION, RUNTIME_ID, MODEL_A, [REPO])  # the same code, the same key
    record_agent_result(root, SHELL_AGENT, key, "agents.harbor.shared_service", "fake", "cpu", True)
    assert require_agent(root, SHELL_AGENT, HARBOR_VERSION, RUNTIME_ID, MODEL_A, "fake", [folder]) is not None
    module.write_text(module.read_text() + "\n# edited\n")
    with pytest.raises(HitchError) as edited:
        require_agent(root, SHELL_AGENT, HARBOR_VERSION, RUNTIME_ID, MODEL_A, "fake", [folder])
    assert edited.value.code == "inference_harness_unsupported"
    with pytest.raises(HitchError) as nowhere:
        agent_key(SHELL_AGENT, HARBOR_VERSION, RUNTIME_ID, MODEL_A, [tmp_path / "elsewhere"])
    assert nowhere.value.code == "inference_harness_unsupported" and "--agent-path" in nowhere.value.message
    # a new Harbor is a new artifact too
    assert agent_key(TERMINUS, "0.26.0", RUNTIME_ID, MODEL_A, []) != agent_key(TERMINUS, HARBOR_VERSION, RUNTIME_ID, MODEL_A, [])


def test_agents_that_call_no_model_need_no_profile(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    for agent in ("oracle", "nop"):
        assert require_agent(root, agent, HARBOR_VERSION, RUNTIME_ID, MODEL_A, "fake", []) is None


# -- the service plus one trial must fit ------------------------------------------------------------------


def test_trial_resources_are_the_tasks_own_else_the_defaults(tmp_path: Path) -> None:
    assert [(r.cpus, r.memory_mb) for r in map(resources_of, task_dirs(TASKS))] == [
        (DEFAULT_CPUS, DEFAULT_MEMORY_MB)
    ] * 3  # the local task set states none
    task = tmp_path / "t"
    task.mkdir()
    for env, want in (
        ("cpus = 0.5\nmemory_mb = 512", (0.5, 512)),
        ('memory = "1G"', (DEFAULT_CPUS, 1024)),
        ("cpus = 2", (2.0, 2048)),
    ):
        (task / "task.toml").write_text(f"[environment]\n{env}\n")
        found = resources_of(task)
        assert (found.cpus, found.memory_mb) == want
    for bad in ("cpus = 0", "cpus = 'two'", "memory_mb = 1.5", 'memory = "lots"'):
        (task / "task.toml").write_text(f"[environment]\n{bad}\n")
        with pytest.raises(HitchError) as info:
            resources_of(task)
        assert info.value.code == "usage_error"


@pytest.mark.integration
def test_a_service_plus_one_trial_that_cannot_fit_the_machine_is_refused_before_anything_starts(root: HitchRoot) -> None:
    """The daemon is told this machine's RAM holds the service and less than one trial's 2 GiB more."""
    from harness.devices import probe_cpu
    from harness.lock import build_lock
    from harness.runtimes import get_runtime

    lock = build_lock(resolve_model(root, "local/tiny"), get_runtime(RUNTIME_ID), device="cpu", profile="baseline",
                      cpu_cores_per_node=probe_cpu().cores_per_node)  # fmt: skip
    service = demand_of(lock.resources)
    memory = service.memory_bytes + DEFAULT_MEMORY_MB * (1 << 20) - 1
    as_json(hitch(root, "daemon", "start", "--json", *FAST, "--capacity-memory", str(memory)))
    record_agent_result(root, TERMINUS, harbor_agent_key(root, TERMINUS), "agents.harbor.terminus_solves", "fake", "cpu", True)
    error = _eval(root)
    assert error["code"] == "inference_capacity_exceeded", error
    details = error["details"]
    assert details["service"]["memory_bytes"] == service.memory_bytes and details["capacity"]["memory_bytes"] == memory
    assert details["trial"]["memory_mb"] == DEFAULT_MEMORY_MB and details["trial"]["cpus"] == DEFAULT_CPUS
    status = DaemonClient(root).status()
    assert status["services"] == [] and status["resources"]["holders"] == []
    assert not (root.path / "evals").exists() and not root.runs.exists()


# -- an engine failure is no reward -----------------------------------------------------------------------


@pytest.mark.parametrize("reward", [0.0, 1.0])
def test_a_trial_whose_engine_failed_has_no_reward_whatever_the_verifier_said(tmp_path: Path, reward: float) -> None:
    resources = resources_of(TASKS / "create-file")
    trial = Trial("t", TASKS / "create-file", "t", "HITCH_TRIAL_TOKEN_0", resources, slot=0)
    trial.result = {"reward": reward, "rewards": {"reward": reward}, "exception": None}
    failed = {"status": "failed", "error": RunErrorV1(code="inference_process_exited", message="engine gone").to_json_dict()}
    out = trial_outcome(HitchRoot(tmp_path), trial, failed)
    assert (out.status, out.reward, out.rewards) == ("failed", None, None)
    assert out.error is not None and out.error.code == "inference_process_exited" and out.resources == resources
    own = trial_outcome(HitchRoot(tmp_path), trial, {"status": "failed", "error": {"code": "harness_run_failed", "message": "x"}})
    assert own.reward == reward  # a failure of the harness itself keeps what the verifier said
