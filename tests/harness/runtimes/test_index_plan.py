"""A runtime's install plan against a package index, without a network: a local PEP 503 index (file://).

The lock of a catalog copy pins four wheels; the index lists one as pinned, one yanked, one under another
sha256 (re-uploaded) and none of the fourth's version. Each is named with its status; the plan's sizes are
the index's (here: the files' own); nothing is downloaded, and the CLI exits with the table's code.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ERROR_TABLE, HitchError
from harness.runtimes import get_runtime, runtime_source_dir
from harness.runtimes.catalog import requirement_pins
from harness.runtimes.index_plan import DEFAULT_INDEX, install_plan, pip_index_url, require_resolvable

CUDA = "sglang-0.5.23-cuda"


def _wheel(files: Path, name: str, version: str, content: bytes) -> tuple[str, str]:
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    (files / filename).write_bytes(content)
    return filename, hashlib.sha256(content).hexdigest()


def _index(tmp_path: Path, catalog: Path) -> str:
    """A file:// simple index and the catalog copy's CUDA lock pinning four wheels against it."""
    root = tmp_path / "index"
    files, simple = root / "files", root / "simple"
    files.mkdir(parents=True)
    good = _wheel(files, "alpha", "1.0", b"alpha wheel")
    yanked = _wheel(files, "beta", "2.0", b"beta wheel")
    replaced = _wheel(files, "gamma", "3.0", b"gamma wheel, uploaded again")
    older = _wheel(files, "delta", "0.9", b"delta wheel")
    pages = {
        "alpha": f'<a href="../../files/{good[0]}#sha256={good[1]}">{good[0]}</a>',
        "beta": f'<a href="../../files/{yanked[0]}#sha256={yanked[1]}" data-yanked="broken build">{yanked[0]}</a>',
        "gamma": f'<a href="../../files/{replaced[0]}#sha256={replaced[1]}">{replaced[0]}</a>',
        "delta": f'<a href="../../files/{older[0]}#sha256={older[1]}">{older[0]}</a>',
    }
    for name, anchor in pages.items():
        (simple / name).mkdir(parents=True)
        (simple / name / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{anchor}\n</body></html>\n")
    pins = [("alpha", "1.0", good[1]), ("beta", "2.0", yanked[1]), ("gamma", "3.0", "0" * 64), ("delta", "1.0", "1" * 64)]
    lock = "".join(f"{n}=={v} \\\n    --hash=sha256:{h}\n" for n, v, h in pins)
    (runtime_source_dir(CUDA, catalog) / "requirements.lock").write_text("# test lock\n" + lock)
    return f"file://{simple}"


def test_each_pin_that_does_not_resolve_is_named_with_why(tmp_path: Path, catalog_copy: Path) -> None:
    index = _index(tmp_path, catalog_copy)
    plan = install_plan(get_runtime(CUDA, catalog_copy), index_url=index, catalog_path=catalog_copy)
    assert (plan.index_url, plan.index_source) == (index, "--index-url")
    status = {p.name: p.status for p in plan.pins}
    assert status == {"alpha": "ok", "beta": "yanked", "gamma": "rehashed", "delta": "missing"}
    by_name = {p.name: p for p in plan.pins}
    assert by_name["alpha"].file is not None and by_name["alpha"].file.size == len(b"alpha wheel")
    assert by_name["beta"].detail == "yanked: broken build"
    assert "the index lists gamma-3.0-py3-none-any.whl sha256:" in by_name["gamma"].detail
    assert by_name["delta"].detail == "the index lists no delta 1.0"
    with pytest.raises(HitchError) as caught:
        require_resolvable(plan)
    assert caught.value.code == "runtime_lock_unresolvable"
    assert "beta==2.0 yanked; gamma==3.0 rehashed; delta==1.0 missing" in caught.value.message


def test_a_project_the_index_does_not_have_is_missing(tmp_path: Path, catalog_copy: Path) -> None:
    index = _index(tmp_path, catalog_copy)
    lock = runtime_source_dir(CUDA, catalog_copy) / "requirements.lock"
    lock.write_text(lock.read_text() + "omega==1.0 \\\n    --hash=sha256:" + "2" * 64 + "\n")
    plan = install_plan(get_runtime(CUDA, catalog_copy), index_url=index, catalog_path=catalog_copy)
    assert plan.pins[-1].status == "missing" and plan.pins[-1].detail == "no such project on the index"


def test_the_index_is_the_one_pip_would_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = https://mirror.example/simple/\nextra-index-url = file:///x/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    assert pip_index_url() == ("https://mirror.example/simple", "pip config global.index-url", ["file:///x/simple"])
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")
    assert pip_index_url()[:2] == ("https://env.example/simple", "PIP_INDEX_URL")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_INDEX_URL")
    assert pip_index_url()[:2] == (DEFAULT_INDEX, "pip's default index")


def test_the_plan_command_fails_with_the_tables_code(tmp_path: Path) -> None:
    empty = tmp_path / "empty-index"
    empty.mkdir()
    argv = [sys.executable, "-c", "from harness.cli.app import main; main()", "runtime", "plan", CUDA]
    argv += ["--index-url", f"file://{empty}", "--json", "--root", str(tmp_path / "root")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == ERROR_TABLE["runtime_lock_unresolvable"].exit_code, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "runtime_lock_unresolvable"
    problems = error["details"]["problems"]
    pins = requirement_pins((runtime_source_dir(CUDA) / "requirements.lock").read_text())
    assert len(problems) == len(pins) > 150 and {p["status"] for p in problems} == {"missing"}
    assert {"name": "sglang", "version": "0.5.23"}.items() <= next(p for p in problems if p["name"] == "sglang").items()
