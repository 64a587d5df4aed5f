"""What ``hitch eval harbor`` refuses before anything starts, and how it finds Harbor's Python (hermetic)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from harness.errors import ERROR_TABLE, HitchError
from harness.evals.harbor_install import find_base_python, harbor_install, requirements_digest
from harness.evals.harbor_run import model_connection, task_dirs
from harness.paths import HitchRoot
from tests.harness.daemon.conftest import hitch

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "fixtures" / "harbor_tasks"


@pytest.mark.parametrize("environment", ["daytona", "modal", "e2b", "runloop"])
def test_cloud_environments_are_refused(environment: str) -> None:
    with pytest.raises(HitchError) as info:
        model_connection("terminus-2", environment)
    assert info.value.code == "local_inference_topology_unsupported"
    assert info.value.details["environment"] == environment


@pytest.mark.parametrize("agent", ["codex", "mini-swe-agent", "fixtures.harbor_agents.shell_agent:ShellAgent"])
def test_other_agents_call_the_model_from_inside_their_container(agent: str) -> None:
    assert model_connection(agent, "docker") == "container"


@pytest.mark.parametrize("agent", ["terminus-2", "fixtures.harbor_agents.shell_agent:ShellAgent"])
def test_cloud_environments_are_refused_whatever_the_agent(agent: str) -> None:
    with pytest.raises(HitchError) as info:
        model_connection(agent, "daytona")
    assert info.value.code == "local_inference_topology_unsupported"


def test_host_side_and_model_free_agents_are_served() -> None:
    assert model_connection("terminus-2", "docker") == "host"
    assert model_connection("oracle", "docker") == "none"


def test_task_set_is_three_local_tasks() -> None:
    found = task_dirs(TASKS)
    assert [p.name for p in found] == ["create-file", "fix-one-line", "read-then-write"]
    for task in found:
        assert (task / "environment" / "Dockerfile").read_text().startswith("FROM hitch/harbor-base:dev\n")
        assert 'environment_mode = "shared"' in (task / "task.toml").read_text()
        assert os.access(task / "tests" / "test.sh", os.X_OK)
    assert task_dirs(TASKS / "create-file") == [TASKS / "create-file"]
    with pytest.raises(HitchError) as info:
        task_dirs(REPO / "docs")
    assert info.value.code == "usage_error"


def test_cli_refuses_a_cloud_environment_before_anything_starts(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    out = hitch(root, "eval", "harbor", "run", str(TASKS), "--model", "local/none", "--env", "modal", "--json")
    assert out.returncode == ERROR_TABLE["local_inference_topology_unsupported"].exit_code, out.stderr
    assert json.loads(out.stdout)["error"]["code"] == "local_inference_topology_unsupported"
    assert not (root.path / "daemon").exists() and not (root.path / "evals").exists()


def test_cli_without_harbor_names_the_install_command(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    out = hitch(root, "eval", "harbor", "run", str(TASKS), "--model", "local/none", "--engine", "fake", "--json")
    error = json.loads(out.stdout)["error"]
    assert error["code"] == "harness_unavailable" and error["details"]["run_first"] == ["hitch eval harbor install"]


def _fake_python(path: Path, version: str, works: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = f"#!/bin/sh\necho {version}\n" if works else "#!/bin/sh\necho 'pyenv: version not installed' >&2\nexit 127\n"
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_base_python_skips_a_broken_shim_and_takes_the_newest_pyenv_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shims = tmp_path / "shims"
    _fake_python(shims / "python3.12", "3.12", works=False)  # a pyenv shim of an inactive version
    pyenv = tmp_path / "pyenv"
    _fake_python(pyenv / "versions" / "3.12.1" / "bin" / "python3.12", "3.12")
    newest = _fake_python(pyenv / "versions" / "3.12.10" / "bin" / "python3.12", "3.12")
    _fake_python(pyenv / "versions" / "3.13.0" / "bin" / "python3.13", "3.13")
    monkeypatch.setenv("PATH", str(shims))
    monkeypatch.setenv("PYENV_ROOT", str(pyenv))
    assert find_base_python("3.12") == str(newest)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "empty"))
    with pytest.raises(HitchError) as info:
        find_base_python("3.12")
    assert info.value.code == "harness_unavailable" and info.value.details["tried"] == [str(shims / "python3.12")]


def test_an_install_for_other_locks_is_not_used(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path)
    folder = root.path / "tools" / "harbor" / requirements_digest()[:32]
    (folder / "venv" / "bin").mkdir(parents=True)
    (folder / "venv" / "bin" / "python").write_text("")
    plugin = folder / "docker-config" / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("")
    (folder / "installed.json").write_text(json.dumps({"lock_digest": "0" * 64, "versions": {}}))
    assert harbor_install(root) is None
    (folder / "installed.json").write_text(json.dumps({"lock_digest": requirements_digest(), "versions": {"harbor": "0.25.0"}}))
    found = harbor_install(root)
    assert found is not None and found.versions["harbor"] == "0.25.0"
    env = found.environ({"PATH": "/usr/bin", "PYTHONPATH": "/elsewhere"})
    assert env["DOCKER_CONFIG"] == str(folder / "docker-config") and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert "PYTHONPATH" not in env
