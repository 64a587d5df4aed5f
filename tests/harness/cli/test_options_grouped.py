"""``opt.grouped`` (applied by ``cli_command``): a command that takes an options dataclass gets the dataclass's
fields as its flags, in the dataclass's place, and receives them back as one object (two groups here: the
service options and ``--json``/``--root``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer
from typer.testing import CliRunner

from harness.cli import options as opt
from harness.cli.output import COMMON, Common, cli_command
from harness.errors import HitchError


@dataclasses.dataclass(frozen=True)
class _Named:
    """A group with a required field (an argument) beside the service group."""

    model: opt.ModelArg


def _app() -> tuple[typer.Typer, list[tuple[str, str, opt.ServiceOptions, bool, Common]]]:
    app = typer.Typer()
    seen: list[tuple[str, str, opt.ServiceOptions, bool, Common]] = []

    @app.command()
    @cli_command
    def cmd(
        name: Annotated[str, typer.Option("--name")],
        named: _Named,
        svc: opt.ServiceOptions = opt.DEFAULT_SERVICE,
        offline: opt.Offline = False,
        common: Common = COMMON,
    ) -> None:
        seen.append((name, named.model, svc, offline, common))
        if name == "refused":
            raise HitchError("usage_error", "refused", {})

    return app, seen


def test_grouped_fields_are_flags_and_come_back_as_the_dataclass() -> None:
    app, seen = _app()
    out = CliRunner().invoke(
        app, ["--name", "n", "local/tiny", "--device", "cpu", "--allow-uncertified", "--engine", "fake", "--offline"]
    )
    assert out.exit_code == 0, out.output
    svc = opt.ServiceOptions(device="cpu", allow_uncertified=True, engine="fake")
    assert seen == [("n", "local/tiny", svc, True, COMMON)]


def test_json_and_root_come_back_as_common(tmp_path: Path) -> None:
    app, seen = _app()
    out = CliRunner().invoke(app, ["--json", "--name", "n", "local/tiny", "--root", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert seen[0][4] == Common(as_json=True, root=tmp_path) and seen[0][4].hroot.path == tmp_path


def test_grouped_defaults_are_the_dataclass_defaults() -> None:
    app, seen = _app()
    out = CliRunner().invoke(app, ["--name", "n", "local/tiny"])
    assert out.exit_code == 0, out.output
    assert seen == [("n", "local/tiny", opt.ServiceOptions(), False, COMMON)]


def test_grouped_required_field_stays_required() -> None:
    app, seen = _app()
    out = CliRunner().invoke(app, ["--name", "n"])
    assert out.exit_code == 2 and not seen


def test_a_grouped_command_keeps_cli_commands_error_handling() -> None:
    app, _ = _app()
    out = CliRunner().invoke(app, ["--name", "refused", "local/tiny", "--json"])
    assert out.exit_code == 2 and '"code": "usage_error"' in out.output


def test_run_and_serve_refuse_an_unknown_capture_mode_before_anything_starts(tmp_path: Path) -> None:
    from harness.cli.app import app

    for argv in (
        ["run", "--harness", "model-call", "--prompt", "hi", "--capture", "everything"],
        ["local", "serve", "local/tiny", "--capture", "everything"],
    ):
        out = CliRunner().invoke(app, [*argv, "--json", "--root", str(tmp_path / "root")])
        assert out.exit_code == 2, out.output
        error = json.loads(out.output)["error"]
        details = {"option": "--capture", "value": "everything", "choices": ["off", "metadata", "full"]}
        assert (error["code"], error["details"]) == ("usage_error", details), argv
    assert not (tmp_path / "root").exists()  # refused before a root, a daemon or a service


def test_the_cli_option_groups_default_to_the_service_specs_one_table() -> None:
    """Left alone, every command's service flags are the spec's defaults: the device rule picks the engine and
    launcher at ``run`` and ``serve`` as it does for certify (no ``sglang``/``process`` preset by the CLI)."""
    from harness.app.spec import SERVICE_DEFAULTS

    flags = dataclasses.asdict(opt.DEFAULT_SERVICE)
    assert flags == {name: value for name, value in SERVICE_DEFAULTS.items() if name != "model"}
    assert SERVICE_DEFAULTS["engine"] is None and SERVICE_DEFAULTS["launcher"] is None
