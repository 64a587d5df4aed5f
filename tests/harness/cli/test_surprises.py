"""No silent surprises: ``local lock``'s human output is not a lock file (``--out FILE`` writes one), ``--device``
defaults to auto and ``--engine`` to sglang everywhere (and help says so), ``--json`` stdout is one JSON document,
``--root`` that is a file is refused as such, ``report build`` fails when it rejected entries, and a missing
file is named as missing."""

from __future__ import annotations

import ast
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from harness.app.choice import resolve_choice
from harness.app.spec import ServiceSpec
from tests.harness.cli.cli_support import error_json, hitch, ok_json
from tests.reports import sample_data as sd


def test_local_lock_defaults_to_auto_and_its_human_output_is_no_lock_file(tiny_root: Path, tmp_path: Path) -> None:
    drafted = ok_json(hitch(tiny_root, "local", "lock", "local/tiny", "--json"))
    auto = resolve_choice(ServiceSpec(device="auto", engine="sglang", allow_uncertified=True)).device
    assert drafted["lock"]["execution"]["platform"]["backend"] == auto
    human = hitch(tiny_root, "local", "lock", "local/tiny")
    assert human.returncode == 0 and "not a lock file" in human.stdout.splitlines()[0]
    with pytest.raises(ValueError):
        json.loads(human.stdout)
    assert f"inference_id: {drafted['inference_id']}" in human.stdout and "greedy (temperature 0)" in human.stdout
    written = ok_json(hitch(tiny_root, "local", "lock", "local/tiny", "--out", str(tmp_path / "lock.json"), "--json"))
    assert written["written"] == str(tmp_path / "lock.json")
    assert json.loads((tmp_path / "lock.json").read_text()) == drafted["lock"]
    checked = ok_json(hitch(tiny_root, "local", "check-lock", str(tmp_path / "lock.json"), "--json"))
    assert checked["inference_id"] == drafted["inference_id"]


@pytest.mark.parametrize(
    "command",
    [("local", "lock"), ("local", "prepare"), ("local", "serve"), ("run",), ("eval", "harbor", "run"), ("bench", "overhead")],
)
def test_help_states_the_one_device_and_engine_default(command: tuple[str, ...]) -> None:
    text = " ".join(hitch(None, *command, "--help").stdout.split())
    if command != ("local", "lock"):  # a draft lock starts no engine
        assert "--engine" in text and "default sglang" in text
    if command[0] != "bench":
        assert "auto | cpu | cuda; default auto" in text


@pytest.mark.parametrize(
    "argv",
    [
        ("models", "list"),
        ("run", "list"),
        ("local", "lock", "local/tiny"),
        ("local", "logs"),
        ("bench", "overhead"),
        ("report", "build", "--out", "/nonexistent-out", "--results", "/nonexistent.json"),
    ],
)
def test_a_root_that_is_a_file_is_refused_as_such(tmp_path: Path, argv: tuple[str, ...]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    err = error_json(hitch(afile, *argv, "--json"), 2)
    assert err["code"] == "usage_error" and err["message"].startswith(f"--root {afile} is not a directory")


def test_a_missing_file_is_named_as_missing(tmp_path: Path) -> None:
    for argv in (("catalog", "verify"), ("local", "check-lock"), ("local", "argv")):
        err = error_json(hitch(tmp_path / "root", *argv, str(tmp_path / "gone.dsse.json"), "--json"), 2)
        assert (err["code"], err["message"]) == ("usage_error", f"no such file: {tmp_path / 'gone.dsse.json'}"), argv


def test_report_build_fails_when_it_rejected_entries(tmp_path: Path) -> None:
    private, keys = sd.signing_key(tmp_path)
    entries = tmp_path / "entries"
    sd.sign_entry(entries, private, sd.predicate())
    (entries / "broken.dsse.json").write_text("{not json")
    out = tmp_path / "out"
    args = ("report", "build", "--entries", str(entries), "--keys", str(keys), "--out", str(out), "--json")
    err = error_json(hitch(tmp_path / "root", *args), 2)
    assert err["code"] == "report_input_invalid" and [r["file"] for r in err["details"]["rejected"]] == ["broken.dsse.json"]
    assert Path(err["details"]["pages"]["matrix"]).is_file()  # written, and listing the rejection
    (entries / "broken.dsse.json").unlink()
    assert ok_json(hitch(tmp_path / "root", *args))["pages"]["matrix"] == str(out / "matrix.html")


@pytest.mark.integration
def test_bench_overhead_json_is_one_document_and_progress_goes_to_stderr(tmp_path: Path) -> None:
    small = ("--rounds", "1", "--requests", "2", "--warmup", "1", "--concurrent-requests", "2", "--concurrency", "2")
    proc = hitch(tmp_path / "root", "bench", "overhead", "--engine", "fake", *small, "--open-streams", "2", "--json")
    out = ok_json(proc)  # the whole of stdout parses as one document
    assert out["kind"] == "bench-overhead" and out["figures"]["engine"] == "fake" and out["figures"]["concurrency"] == 2
    assert "wrote" in proc.stderr


def test_hitch_help_imports_no_command_area() -> None:
    """``hitch --help`` lists the areas from their names and help alone: none of their modules, no contracts."""
    code = (
        "import sys\n"
        "sys.argv = ['hitch', '--help']\n"
        "from harness.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        "areas = ('harness.cli.', 'harness.contracts', 'harness.app', 'pydantic')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(areas))\n"
        "sys.stderr.write(repr(loaded))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "local     locks, doctor" in proc.stdout
    loaded = ast.literal_eval(proc.stderr.strip().splitlines()[-1])
    assert set(loaded) <= {"harness.cli.app", "harness.cli.options", "harness.cli.output", "harness.cli.version"}, loaded


def test_a_slow_step_shows_a_live_line_on_a_terminal_only() -> None:
    """``progress.step`` writes its line to a terminal's stderr and nothing elsewhere (stdout never)."""
    code = (
        "from harness.cli import progress\n"
        "with progress.step('building the thing'):\n    pass\n"
        "with progress.step('quiet', as_json=True):\n    pass\n"
    )
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdin, stdout and stderr are the terminal
        os.execv(sys.executable, [sys.executable, "-c", code])
    seen = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    assert os.waitpid(pid, 0)[1] == 0
    text = seen.decode()
    assert text.startswith("building the thing ...") and "\rbuilding the thing ... done (" in text and "quiet" not in text
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert piped.stdout == piped.stderr == ""
