"""``doctor`` as a CLI command: JSON validates, human text renders, and nothing is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from harness.cli.doctor_cmd import doctor
from harness.devices import DoctorReportV1


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("doctor")(doctor)

    @app.command("noop")
    def noop() -> None:
        """Second command so typer keeps ``doctor`` as a sub-command."""

    return app


def _snapshot(path: Path) -> dict[str, tuple[int, int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.rglob("*"))}


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME, XDG dirs, cwd and DOCKER_HOST all point into tmp_path; Docker is unreachable."""
    for name in ("home", "cwd"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home" / ".local" / "share"))
    monkeypatch.delenv("HITCH_ROOT", raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


def test_json_validates_and_names_amx_and_driver(isolated: Path) -> None:
    result = CliRunner().invoke(_app(), ["doctor", "--device", "auto", "--json", "--root", str(isolated / "root")])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    report = DoctorReportV1.model_validate(payload)
    assert payload["schema_version"] == "1"
    assert payload["kind"] == "doctor"
    assert set(report.devices) == {"cpu", "cuda"}
    assert report.docker.reachable is False
    assert report.docker.reason is not None and "nonexistent.sock" in report.docker.reason
    if not report.cpu.amx:
        assert any("AMX" in r for r in report.devices["cpu"].reasons)
    if not report.cuda.available:
        assert any(r.startswith("no NVIDIA driver") for r in report.devices["cuda"].reasons)
    assert report.selected is None
    assert report.host.hitch_root == str(isolated / "root")
    assert report.host.hitch_root_exists is False
    assert "Traceback" not in result.output


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_single_device_shows_only_its_verdict(isolated: Path, device: str) -> None:
    result = CliRunner().invoke(_app(), ["doctor", "--device", device, "--json", "--root", str(isolated / "root")])
    assert result.exit_code == 0, result.output
    report = DoctorReportV1.model_validate(json.loads(result.stdout))
    assert list(report.devices) == [device]
    assert report.requested_device == device


def test_doctor_writes_nothing(isolated: Path) -> None:
    existing = isolated / "existing-root"
    (existing / "models").mkdir(parents=True)
    (existing / "models" / "m.json").write_text("{}")
    before = {name: _snapshot(isolated / name) for name in ("existing-root", "home", "cwd")}
    runner = CliRunner()
    for args in (["--json"], []):
        assert runner.invoke(_app(), ["doctor", *args, "--root", str(existing)]).exit_code == 0
        assert runner.invoke(_app(), ["doctor", *args, "--root", str(isolated / "new-root")]).exit_code == 0
        assert runner.invoke(_app(), ["doctor", *args]).exit_code == 0
    after = {name: _snapshot(isolated / name) for name in ("existing-root", "home", "cwd")}
    assert after == before
    assert not (isolated / "new-root").exists()
    assert sorted(os.listdir(isolated)) == ["cwd", "existing-root", "home"]


def test_human_output_states_verdicts(isolated: Path) -> None:
    result = CliRunner().invoke(_app(), ["doctor", "--root", str(isolated / "root")])
    assert result.exit_code == 0, result.output
    assert "cpu:" in result.stdout and "cuda:" in result.stdout
    assert "selected:" in result.stdout
    assert "fake engine (contract)" in result.stdout
    assert "Traceback" not in result.output


def test_unknown_device_is_a_usage_error(isolated: Path) -> None:
    result = CliRunner().invoke(_app(), ["doctor", "--device", "tpu"])
    assert result.exit_code == 2


def test_json_prints_the_settings_in_force_with_secrets_masked(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "tok-" + "9" * 24
    monkeypatch.setenv("HITCH_LOCAL_MODEL_TOKEN", secret)
    monkeypatch.setenv("HITCH_REQUIRE_DOCKER", "1")
    monkeypatch.setenv("HITCH_REQUIRE_CODEX", "0")
    monkeypatch.setenv("HITCH_LOAD_SEED", "7")
    result = CliRunner().invoke(_app(), ["doctor", "--json", "--root", str(isolated / "root")])
    assert result.exit_code == 0, result.output
    assert secret not in result.output
    report = DoctorReportV1.model_validate(json.loads(result.stdout))
    assert report.settings is not None
    shown = {s.name: s for s in report.settings}
    assert len(shown) == len(report.settings), "each variable is declared once"
    assert (shown["HITCH_LOCAL_MODEL_TOKEN"].value, shown["HITCH_LOCAL_MODEL_TOKEN"].secret) == ("***", True)
    assert (shown["HITCH_REQUIRE_DOCKER"].value, shown["HITCH_REQUIRE_DOCKER"].source) == (True, "environment")
    assert shown["HITCH_REQUIRE_CODEX"].value is False  # 0 turns the requirement off
    assert (shown["HITCH_LOAD_SEED"].value, shown["HITCH_LOAD_MAX_TOKENS"].value) == (7, 16)
    assert (shown["HITCH_LOAD_MAX_TOKENS"].source, shown["HITCH_ROOT"].source) == ("default", "default")
    assert shown["HITCH_ROOT"].value == str(isolated / "home" / ".local" / "share" / "hitch")  # the default in force
    human = CliRunner().invoke(_app(), ["doctor", "--root", str(isolated / "root")])
    assert secret not in human.output and "HITCH_LOCAL_MODEL_TOKEN=***" in human.output


def test_a_malformed_setting_is_a_usage_error_naming_the_variable(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HITCH_LOAD_MAX_TOKENS", "many")
    result = CliRunner().invoke(_app(), ["doctor", "--json", "--root", str(isolated / "root")])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["details"]) == ("usage_error", {"variable": "HITCH_LOAD_MAX_TOKENS"})
