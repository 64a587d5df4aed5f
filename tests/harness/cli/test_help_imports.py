"""``hitch <group> --help`` imports only what it prints: the command modules and their options, never the layers
the commands run (the application layer, the service core, the contracts, Harbor, the catalog's signing, the
comparisons). Asserted on the modules a fresh process holds after the help, never on time."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import get_args

import pytest

from harness.cli.app import GROUPS
from harness.cli.run_views import RUN_STATUSES
from harness.contracts.run import RunStatus

# what a group's help must not load: each costs tens to hundreds of ms of CPU at every `--help`
HEAVY = (
    "harness.app",
    "harness.agents",
    "harness.bundle",
    "harness.compare.figures",
    "harness.contracts",
    "harness.daemon",
    "harness.devices",
    "harness.engine",
    "harness.evals",
    "harness.lock",
    "harness.run_ref",
    "harness.runtimes",
    "harness.service",
    "harness.store",
    "catalog",
    "gateway",
    "reports",
    "aiohttp",
    "docker",
    "httpx",
)

_PROBE = """
import contextlib, io, json, sys
sys.argv = ["hitch", *sys.argv[1:], "--help"]
from harness.cli.app import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main()
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "help": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _help(*argv: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


def _loaded(modules: object, heavy: str) -> list[str]:
    assert isinstance(modules, list)
    return [m for m in modules if m == heavy or m.startswith(heavy + ".")]


@pytest.mark.parametrize("group", ["", *GROUPS])
def test_a_groups_help_imports_none_of_the_layers_its_commands_run(group: str) -> None:
    shown = _help(*([group] if group else []))
    assert shown["code"] == 0 and "Usage:" in str(shown["help"])
    loaded = {heavy: _loaded(shown["modules"], heavy) for heavy in HEAVY}
    assert {h: m for h, m in loaded.items() if m} == {}


def test_the_local_groups_help_still_lists_every_command_and_the_generation_option() -> None:
    shown = str(_help("local")["help"])
    for command in ("doctor", "lock", "check-lock", "argv", "prepare", "status", "stop", "logs", "serve"):
        assert command in shown
    assert "--generation" in str(_help("local", "lock")["help"])


def test_the_run_statuses_the_help_names_are_the_contracts() -> None:
    assert get_args(RunStatus) == RUN_STATUSES
