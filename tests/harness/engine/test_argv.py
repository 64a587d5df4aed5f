"""Lock → exact argv: every serving value explicit, keys never on the command line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.engine import EngineProgram, engine_flags, expected_server_info, prepare_launch, wire_model_name
from harness.engine.argv import FAKE_ENGINE_MODULE, parser_flags
from harness.errors import HitchError
from harness.runtimes import InstalledRuntime, get_runtime
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs, checkpoint_cache, service_inputs


def _pairs(flags: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, tok in enumerate(flags):
        if tok.startswith("--"):
            nxt = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
            out[tok] = nxt
    return out


def test_flags_pin_every_serving_value_of_the_lock(inputs: ServiceInputs) -> None:
    lock = inputs.lock
    ex = lock.execution
    flags = _pairs(engine_flags(lock, inputs.model_dir, "127.0.0.1", 31234, "/private/engine-config.yaml"))
    assert flags["--model-path"] == str(inputs.model_dir)
    assert flags["--served-model-name"] == "local-" + lock.model_id.split(":")[1][:12]
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "31234"
    assert flags["--config"] == "/private/engine-config.yaml"
    assert flags["--device"] == "cpu"
    assert flags["--dtype"] == ex.dtype == "bfloat16"
    assert flags["--kv-cache-dtype"] == ex.kv_cache_dtype
    assert flags["--context-length"] == str(ex.context_tokens_per_request) == "2048"
    assert flags["--max-running-requests"] == str(ex.max_running_requests)
    assert flags["--max-queued-requests"] == str(ex.max_queued_requests)
    assert flags["--max-total-tokens"] == str(ex.max_total_tokens)
    assert flags["--chunked-prefill-size"] == str(ex.chunked_prefill_size)
    assert flags["--max-prefill-tokens"] == str(ex.max_prefill_tokens)
    assert flags["--attention-backend"] == "torch_native"
    assert flags["--sampling-backend"] == "pytorch"
    assert flags["--random-seed"] == "0"
    assert flags["--mem-fraction-static"] == "0.05"
    for flag in ("--enable-metrics", "--disable-radix-cache", "--disable-overlap-schedule"):
        assert flag in flags and flags[flag] is None
    assert "--skip-server-warmup" not in flags
    assert "--api-key" not in flags and "--admin-api-key" not in flags


def test_throughput_profile_keeps_the_radix_cache(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    inputs = service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()), profile="throughput")
    assert "--disable-radix-cache" not in engine_flags(inputs.lock, inputs.model_dir, "127.0.0.1", 1, "/c.yaml")


def test_switching_engine_changes_only_the_executable(inputs: ServiceInputs, tmp_path: Path) -> None:
    runtime = InstalledRuntime(get_runtime(GENERIC_RUNTIME), tmp_path, tmp_path / "venv/bin/python", {"PYTHONPATH": "/shim"})
    real = prepare_launch(
        inputs.root, inputs.lock, inputs.model_dir, EngineProgram.from_runtime(runtime), service_id="s", epoch=1, port=4000
    )
    fake = prepare_launch(inputs.root, inputs.lock, inputs.model_dir, EngineProgram.fake(), service_id="s", epoch=1, port=4000)
    assert real.spec.argv[:3] == [str(tmp_path / "venv/bin/python"), "-m", "sglang.launch_server"]
    assert fake.spec.argv[:3] == [sys.executable, "-m", FAKE_ENGINE_MODULE]
    assert real.spec.argv[3:] == fake.spec.argv[3:]
    assert real.spec.env["PYTHONPATH"] == "/shim" and "PYTHONPATH" not in fake.spec.env


def test_launch_spec_carries_labels_log_and_secret_file_but_no_key(inputs: ServiceInputs) -> None:
    launch = prepare_launch(
        inputs.root, inputs.lock, inputs.model_dir, EngineProgram.fake(), service_id="svc", epoch=3, port=4001
    )
    spec = launch.spec
    assert spec.log_path == inputs.root.service_dir("svc") / "engine.log"
    assert spec.labels["dev.hitch.epoch"] == "3" and spec.labels["dev.hitch.service"] == "svc"
    assert spec.labels["dev.hitch.inference_id"] == inputs.lock.inference_id
    assert list(spec.secret_files.values()) == [launch.key_files.config]
    joined = " ".join(spec.argv) + " ".join(f"{k}={v}" for k, v in spec.env.items())
    for key in launch.keys.values():
        assert key not in joined
        assert key not in repr(launch) and key not in repr(spec)
    assert launch.wire_model == wire_model_name(inputs.lock.model_id)


def test_oci_launch_points_the_config_flag_at_the_mounted_secret(inputs: ServiceInputs) -> None:
    launch = prepare_launch(
        inputs.root, inputs.lock, inputs.model_dir, EngineProgram.fake(), service_id="svc", epoch=1, port=30000, launcher="oci"
    )
    argv = launch.spec.argv
    mounted = argv[argv.index("--config") + 1]
    assert mounted == "/run/hitch/engine-config.yaml"
    assert launch.spec.secret_files == {mounted: launch.key_files.config}


def test_fake_program_refuses_sglang_flags() -> None:
    with pytest.raises(HitchError) as info:
        EngineProgram.fake(("--api-key", "x"))
    assert info.value.code == "usage_error"


def test_the_locks_tool_call_parser_reaches_the_engine(inputs: ServiceInputs) -> None:
    lock = inputs.lock
    assert lock.protocol.tool_call_parser == "hermes"  # the tiny fixture's template renders <tool_call> markup
    flags = engine_flags(lock, inputs.model_dir, "127.0.0.1", 31234, "/private/engine-config.yaml")
    assert _pairs(flags)["--tool-call-parser"] == "hermes"
    plain = lock.model_copy(update={"protocol": lock.protocol.model_copy(update={"tool_call_parser": None, "tool_calls": False})})
    assert "--tool-call-parser" not in engine_flags(plain, inputs.model_dir, "127.0.0.1", 31234, "/private/engine-config.yaml")


def test_server_info_expectations_and_flags_come_from_one_table(inputs: ServiceInputs) -> None:
    for probe in (False, True):
        flags = engine_flags(inputs.lock, inputs.model_dir, "127.0.0.1", 4000, "/c.yaml", probe=probe)
        expected = expected_server_info(inputs.lock, inputs.model_dir, 4000, probe=probe)
        on_line = {f[2:].replace("-", "_"): v for f, v in _pairs(flags).items() if f != "--config"}
        # every flag's field is expected back with the flag's value (a bare flag: True) ...
        for field, value in on_line.items():
            assert field in expected, field
            assert str(expected[field]) == value if value is not None else expected[field] is True
        # ... and every other expected field is SGLang's default of an absent flag (False, None), or the pool
        others = {k: v for k, v in expected.items() if k not in on_line}
        assert {k for k, v in others.items() if v not in (False, None)} == (set() if probe else {"max_total_num_tokens"})
    assert _pairs(flags)["--config"] == "/c.yaml"


def test_deprecated_parser_names_reach_sglang_as_the_names_it_echoes(inputs: ServiceInputs) -> None:
    # SGLang 0.5.23 renames qwen25/glm45 during resolution: /server_info would never echo the lock's name
    for old, new in (("qwen25", "qwen"), ("glm45", "glm")):
        lock = inputs.lock.model_copy(update={"protocol": inputs.lock.protocol.model_copy(update={"tool_call_parser": old})})
        assert _pairs(engine_flags(lock, inputs.model_dir, "127.0.0.1", 1, "/c.yaml"))["--tool-call-parser"] == new
        assert expected_server_info(lock, inputs.model_dir, 1)["tool_call_parser"] == new
        assert parser_flags(lock) == ["--tool-call-parser", new]
