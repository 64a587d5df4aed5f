"""``hitch report build`` as a user runs it: pages written, paths printed, errors with table codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.reports import sample_data as sd

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]


def _hitch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HITCH, "report", "build", *args], capture_output=True, text=True, timeout=120, env={**os.environ})


def test_build_writes_every_page_and_prints_the_paths(tmp_path: Path) -> None:
    private, keys = sd.signing_key(tmp_path)
    entries = tmp_path / "entries"
    sd.sign_entry(entries, private, sd.predicate())
    results = tmp_path / "results.json"
    results.write_text(json.dumps(sd.results()))
    load = sd.write_locust_dir(tmp_path / "load")
    out = tmp_path / "out"
    args = ["--entries", str(entries), "--keys", str(keys), "--results", str(results), "--load", str(load), "--out", str(out)]
    proc = _hitch(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema_version"] == "1"
    assert data["pages"] == {k: str(out / f"{k}.html") for k in ("matrix", "compare", "run", "load")}
    assert all(Path(p).is_file() for p in data["pages"].values())
    assert 'class="matrix-row"' in (out / "matrix.html").read_text()
    human = _hitch(*args)
    assert human.returncode == 0 and f"run: {out / 'run.html'}" in human.stdout


def test_bad_inputs_exit_with_the_table_code(tmp_path: Path) -> None:
    proc = _hitch("--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "report_input_invalid"
    (tmp_path / "results.json").write_text("[1, 2]")
    proc = _hitch("--results", str(tmp_path / "results.json"), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["code"] == "report_input_invalid"
    assert not (tmp_path / "out").exists()
