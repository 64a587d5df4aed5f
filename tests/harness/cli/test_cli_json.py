"""The whole `hitch` CLI as a user runs it: every --json output validates against the committed
JSON Schemas (docs/schemas, checked independently with `jsonschema`), and errors carry table codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from harness.schema_export import SCHEMA_DIR

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HITCH, *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "200", "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["schema_version"] == "1"
    return data


def _validate(instance: Any, record: str) -> None:
    schema = json.loads((SCHEMA_DIR / f"{record}.schema.json").read_text())
    jsonschema.validate(instance, schema)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("cli")
    root = base / "root"
    ckpt = base / "tiny"
    _json(_run(root, "fixtures", "checkpoint", str(ckpt), "--json"))
    added = _json(_run(root, "models", "add", str(ckpt), "--name", "tiny", "--json"))
    return root, added["model_id"]


def test_models_inspect_json_validates(imported: tuple[Path, str]) -> None:
    root, model_id = imported
    out = _json(_run(root, "models", "inspect", "local/tiny", "--json"))
    _validate(out["manifest"], "LocalModelManifestV1")
    assert out["manifest"]["model_id"] == model_id


def test_local_lock_json_validates_and_is_deterministic(imported: tuple[Path, str]) -> None:
    root, model_id = imported
    first = _json(_run(root, "local", "lock", "local/tiny", "--device", "cpu", "--profile", "baseline", "--json"))
    _validate(first["lock"], "InferenceLockV1")
    assert first["lock"]["model_id"] == model_id
    assert first["inference_id"] == first["lock"]["inference_id"]
    again = _json(_run(root, "local", "lock", f"local/{model_id}", "--device", "cpu", "--json"))
    assert again["inference_id"] == first["inference_id"]
    thr = _json(_run(root, "local", "lock", "local/tiny", "--device", "cpu", "--profile", "throughput", "--json"))
    assert thr["inference_id"] != first["inference_id"]
    bench = _json(_run(root, "local", "lock", "local/tiny", "--device", "cpu", "--benchmark", "--json"))
    _validate(bench["lock"], "InferenceLockV1")
    assert bench["lock"]["generation"]["benchmark_controls"] == ["ignore_eos", "min_tokens"]
    assert "benchmark_controls" not in first["lock"]["generation"] and bench["inference_id"] != first["inference_id"]


def test_lock_file_round_trips_through_check_lock(imported: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = imported
    lock = _json(_run(root, "local", "lock", "local/tiny", "--json"))["lock"]
    path = tmp_path / "lock.json"
    path.write_text(json.dumps(lock))
    assert _json(_run(root, "local", "check-lock", str(path), "--json"))["valid"] is True
    lock["execution"]["platform"]["cuda_graph"] = "enabled"  # a cuda field on a cpu lock
    path.write_text(json.dumps(lock))
    bad = _run(root, "local", "check-lock", str(path), "--json")
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["error"]["code"] == "inference_lock_invalid"


def test_local_argv_prints_the_command_line_a_cuda_lock_compiles_to(imported: tuple[Path, str], tmp_path: Path) -> None:
    root, model_id = imported
    draft = _run(root, "local", "lock", "local/tiny", "--device", "cuda", "--json")
    (tmp_path / "lock.json").write_text(draft.stdout)  # what `local lock --json` prints is accepted as is
    out = _json(_run(root, "local", "argv", str(tmp_path / "lock.json"), "--gpu", "GPU-1", "--json"))
    assert (out["runtime"], out["inference_id"], out["checked"]) == ("sglang-0.5.23-cuda", _json(draft)["inference_id"], None)
    argv = out["argv"]
    assert argv[1:3] == ["-m", "sglang.launch_server"] and argv[0].endswith("/venv/bin/python")
    assert argv[argv.index("--device") + 1] == "cuda" and argv[argv.index("--config") + 1] == "<private>/engine-config.yaml"
    assert model_id.split(":")[1] in argv[argv.index("--model-path") + 1]
    assert out["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-1" and "SGLANG_USE_CPU_ENGINE" not in out["env"]
    assert out["expected_server_info"]["device"] == "cuda" and "max_total_num_tokens" in out["expected_server_info"]
    probe = _json(_run(root, "local", "argv", str(tmp_path / "lock.json"), "--gpu", "GPU-1", "--probe", "--json"))
    assert "--max-total-tokens" in argv and "--max-total-tokens" not in probe["argv"]
    # --check needs a runtime with that SGLang under --parser-root: none in an empty root
    missing = _run(root, "local", "argv", str(tmp_path / "lock.json"), "--check", "--parser-root", str(tmp_path / "e"), "--json")
    assert json.loads(missing.stdout)["error"]["code"] == "inference_runtime_unavailable"


def test_metal_and_unpinned_cuda_are_refused(imported: tuple[Path, str]) -> None:
    root, _ = imported
    metal = _run(root, "local", "lock", "local/tiny", "--device", "metal", "--json")
    assert json.loads(metal.stdout)["error"]["code"] == "usage_error"  # no catalog runtime serves metal
    assert metal.returncode == 2
    cuda = _run(root, "local", "lock", "local/tiny", "--device", "cuda", "--runtime", "sglang-0.5.16-cuda", "--json")
    assert json.loads(cuda.stdout)["error"]["code"] == "inference_runtime_unpinned"
    # the default CUDA runtime is the hash-pinned python-env one: its lock builds
    default = _run(root, "local", "lock", "local/tiny", "--device", "cuda", "--json")
    assert default.returncode == 0, default.stdout + default.stderr


def test_unknown_model_exits_2_with_code(tmp_path: Path) -> None:
    proc = _run(tmp_path / "root", "local", "lock", "local/nope", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "local_model_not_found"
    human = _run(tmp_path / "root", "local", "lock", "local/nope")
    assert human.returncode == 2 and "error[local_model_not_found]" in human.stderr and "Traceback" not in human.stderr


def test_doctor_json_validates(tmp_path: Path) -> None:
    out = _json(_run(tmp_path / "root", "local", "doctor", "--device", "auto", "--json"))
    _validate({k: v for k, v in out.items() if k != "schema_version"} | {"schema_version": "1"}, "DoctorReportV1")
    assert not (tmp_path / "root").exists(), "the doctor is read-only"


def test_runtime_list_json_validates(tmp_path: Path) -> None:
    out = _json(_run(tmp_path / "root", "runtime", "list", "--json"))
    assert {r["name"] for r in out["runtimes"]} >= {
        "sglang-0.5.15.post1-cpu",
        "sglang-0.5.16-cuda",
        "sglang-0.5.23-cpu-generic",
    }
    for runtime in out["runtimes"]:
        _validate(runtime, "InferenceRuntimeManifestV1")
