"""Every command line a lock compiles to, read by SGLang 0.5.23's own parser and resolution (no GPU needed).

The generic-CPU runtime ships the same ``sglang==0.5.23`` wheel as the CUDA runtime: its venv runs
``harness/engine/sglang_args_runner.py`` once for every combination (cpu/cuda x baseline/throughput x with and
without a tool-call parser x each quantization the allow-list admits, each also as prepare's probe start; on
cuda the lock's other platform choices and every tool-call parser name). Each flag must be a flag of SGLang's
parser, set the ServerArgs field we mean with the value the lock means (stated here from the lock, not from
``argv.py``), and come back unchanged from SGLang's resolution, which is what ``/server_info`` echoes; each
``/server_info`` field readiness waits for must be a ServerArgs field with that value. Deliberately wrong
command lines (a misspelled flag, an abbreviated one, a bad value) ride in the same run and must fail naming
what is wrong. Skipped without the runtime, failing under HITCH_REQUIRE_SGLANG=1.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.contracts.lock import CpuPlatformV1, CudaPlatformV1, InferenceLockV1, compute_inference_id
from harness.engine import EngineProgram, prepare_launch, wire_model_name
from harness.engine.argv_check import (
    ArgvCase,
    SglangArgvReportV1,
    argv_problems,
    case_from_launch,
    read_with_sglang,
    require_accepted,
)
from harness.engine.verify import SCHEDULER_INFO_FIELDS, server_info_mismatches
from harness.errors import HitchError
from harness.lock import (
    CERTIFIED_QUANTIZATIONS,
    Device,
    ProfileShort,
    build_lock,
    claims_parallel_tool_calls,
    validate_lock,
)
from harness.paths import HitchRoot
from harness.runtimes import InstalledRuntime, get_runtime
from harness.sglang_parsers import SGLANG_TOOL_CALL_PARSERS
from harness.store import read_manifest
from tests.components import installed_sglang
from tests.harness.engine.inputs import GENERIC_RUNTIME, checkpoint_cache, service_inputs

pytestmark = [pytest.mark.integration, pytest.mark.needs_sglang, pytest.mark.slow]

CUDA_RUNTIME = "sglang-0.5.23-cuda"
GPU = "GPU-8f2c3c1e-1111-2222-3333-444455556666"
PORT = 30123
# SGLang 0.5.23 renames these deprecated parser names in its resolution; the engine is given the new name
RENAMED_PARSERS = {"qwen25": "qwen", "glm45": "glm"}
DEVICES: tuple[tuple[Device, str], ...] = (("cpu", GENERIC_RUNTIME), ("cuda", CUDA_RUNTIME))
PROFILES: tuple[ProfileShort, ...] = ("baseline", "throughput")


def _variant(lock: InferenceLockV1, section: str, **changes: Any) -> InferenceLockV1:
    data = lock.to_json_dict()
    target = data["execution"]["platform"] if section == "platform" else data[section]
    target.update(changes)
    data["inference_id"] = compute_inference_id(data)
    return validate_lock(data)  # only locks the product admits are compiled


def _locks(root: HitchRoot, model_id: str) -> dict[str, InferenceLockV1]:
    manifest = read_manifest(root, model_id)
    locks: dict[str, InferenceLockV1] = {}
    for device, runtime in DEVICES:
        for profile in PROFILES:
            base = build_lock(manifest, get_runtime(runtime), device=device, profile=profile, cpu_cores_per_node=2)
            assert base.protocol.tool_call_parser == "hermes"  # the tiny checkpoint's ChatML template
            for parser in ("hermes", None):
                with_parser = _variant(
                    base, "protocol", tool_call_parser=parser, tool_calls=parser is not None,
                    parallel_tool_calls=claims_parallel_tool_calls(parser),
                )  # fmt: skip
                for quantization in [None, *sorted(CERTIFIED_QUANTIZATIONS)]:
                    lock = _variant(with_parser, "execution", quantization=quantization)
                    locks[f"{device}-{profile}-{parser or 'no-parser'}-{quantization or 'unquantized'}"] = lock
    cuda = locks["cuda-throughput-hermes-unquantized"]
    locks["cuda-graphs-disabled"] = _variant(cuda, "platform", cuda_graph="disabled")
    locks["cuda-overlap-disabled"] = _variant(cuda, "platform", overlap_schedule=False)
    baseline = locks["cuda-baseline-hermes-unquantized"]
    locks["cuda-deterministic"] = _variant(baseline, "execution", deterministic_inference=True, sampling_backend="pytorch")
    for parser in SGLANG_TOOL_CALL_PARSERS:
        locks[f"cuda-parser-{parser}"] = _variant(
            baseline, "protocol", tool_call_parser=parser, parallel_tool_calls=claims_parallel_tool_calls(parser)
        )
    return locks


def _meaning(lock: InferenceLockV1, model_dir: Path, probe: bool) -> dict[str, Any]:
    """ServerArgs field → the value ``lock`` means, stated from the lock's fields (independently of argv.py)."""
    ex = lock.execution
    platform = ex.platform
    assert isinstance(platform, CpuPlatformV1 | CudaPlatformV1)
    parser = lock.protocol.tool_call_parser
    meaning: dict[str, Any] = {
        "model_path": str(model_dir),
        "served_model_name": wire_model_name(lock.model_id),
        "host": "127.0.0.1",
        "port": PORT,
        "device": platform.backend,
        "load_format": ex.load_format,
        "dtype": ex.dtype,
        "kv_cache_dtype": ex.kv_cache_dtype,
        "quantization": ex.quantization,
        "context_length": ex.context_tokens_per_request,
        "max_running_requests": ex.max_running_requests,
        "max_queued_requests": ex.max_queued_requests,
        "max_total_tokens": None if probe else ex.max_total_tokens,
        "attention_backend": ex.attention_backend,
        "sampling_backend": ex.sampling_backend,
        "random_seed": lock.generation.seed,
        "mem_fraction_static": platform.mem_fraction_static,
        "enable_metrics": True,
        "log_requests": True,
        "log_requests_level": 0,
        "log_requests_format": "json",
        "load_snapshot_publish_interval": 1,  # the abort check's snapshots are at most one decode step old
        "disable_radix_cache": ex.prefix_cache.mode == "disabled",
        "disable_overlap_schedule": not platform.overlap_schedule,
        "enable_deterministic_inference": ex.deterministic_inference,
        "tool_call_parser": RENAMED_PARSERS.get(parser, parser) if parser else None,
        "reasoning_parser": lock.protocol.reasoning_parser,
    }
    if not probe:  # on the probe start SGLang sizes these itself (probe.py)
        meaning.update(chunked_prefill_size=ex.chunked_prefill_size, max_prefill_tokens=ex.max_prefill_tokens)
    if isinstance(platform, CpuPlatformV1):
        meaning["sleep_on_idle"] = True  # an idle CPU engine does not spin a core
    if isinstance(platform, CudaPlatformV1):
        graphs = platform.cuda_graph == "enabled"
        meaning.update(
            cuda_graph_max_bs_decode=ex.max_running_requests if graphs else None,
            cuda_graph_backend_decode=None if graphs else "disabled",
            cuda_graph_backend_prefill=None if graphs else "disabled",
        )
    return meaning


def _misspelled(case: ArgvCase, name: str, flag: str, wrong: str) -> ArgvCase:
    """``case`` as if argv.py spelled ``flag`` as ``wrong`` (its table entry too: the expected field follows)."""
    field, wrong_field = flag[2:].replace("-", "_"), wrong[2:].replace("-", "_")
    expected = {(wrong_field if k == field else k): v for k, v in case.expected.items()}
    flags = [wrong if f == flag else f for f in case.flags]
    return replace(case, name=name, flags=flags, expected=expected)


class Reading:
    def __init__(self, report: SglangArgvReportV1, cases: dict[str, ArgvCase], meanings: dict[str, dict[str, Any]]):
        self.report = report
        self.cases = cases
        self.meanings = meanings
        self.by_name = {r.name: r for r in report.cases}


@pytest.fixture(scope="module")
def reading(tmp_path_factory: pytest.TempPathFactory) -> Reading:
    runtime = installed_sglang()
    inputs = service_inputs(tmp_path_factory.mktemp("argv") / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))
    cuda = get_runtime(CUDA_RUNTIME)
    programs = {
        "cpu": EngineProgram.from_runtime(runtime),
        # the CUDA runtime as it would be installed (its python is never run here)
        "cuda": EngineProgram.from_runtime(
            InstalledRuntime(cuda, Path("/cuda-rt"), Path("/cuda-rt/venv/bin/python"), dict(cuda.launch_env))
        ),
    }
    cases: dict[str, ArgvCase] = {}
    meanings: dict[str, dict[str, Any]] = {}
    for name, lock in _locks(inputs.root, inputs.lock.model_id).items():
        main = not name.startswith("cuda-parser-")
        for probe in (False, True) if main else (False,):
            key = f"{name}-probe" if probe else name
            device = lock.execution.platform.backend
            launch = prepare_launch(
                inputs.root,
                lock,
                inputs.model_dir,
                programs[device],
                service_id=f"argv-{len(cases)}",
                epoch=1,
                port=PORT,
                gpu_uuid=GPU if device == "cuda" else None,
                probe=probe,
            )
            cases[key] = case_from_launch(key, launch)
            meanings[key] = _meaning(lock, inputs.model_dir, probe)
    base = cases["cuda-baseline-hermes-unquantized"]
    wrong = [
        _misspelled(base, "wrong-misspelled", "--kv-cache-dtype", "--kv-cache-dtipe"),
        _misspelled(base, "wrong-abbreviated", "--max-queued-requests", "--max-queued-request"),  # argparse takes a prefix
        replace(
            base,
            name="wrong-attention-backend",
            flags=[("flashinfr" if f == "flashinfer" else f) for f in base.flags],
        ),
    ]
    report = read_with_sglang(runtime, [*cases.values(), *wrong])
    return Reading(report, {**cases, **{c.name: c for c in wrong}}, meanings)


def test_the_reader_is_the_cuda_runtimes_sglang(reading: Reading) -> None:
    assert reading.report.versions["sglang"] == get_runtime(CUDA_RUNTIME).engine_version == "0.5.23"
    combos = [n for n in reading.meanings if not n.startswith("cuda-parser-")]
    # cpu/cuda x baseline/throughput x parser/none x quantizations, each also as a probe start, + 3 cuda variants
    assert len(combos) == 2 * (2 * 2 * 2 * (1 + len(CERTIFIED_QUANTIZATIONS)) + 3)
    assert len(reading.meanings) - len(combos) == len(SGLANG_TOOL_CALL_PARSERS)


def test_every_combination_is_read_by_sglang_as_the_lock_means(reading: Reading) -> None:
    failures: list[str] = []
    for name, meaning in reading.meanings.items():
        case, got = reading.cases[name], reading.by_name[name]
        assert got.unknown_flags == [] and got.error is None, (name, got.unknown_flags, got.error)
        assert got.parsed is not None and got.resolved is not None, (name, got.resolve_error)
        # every flag sets the field we mean (the ServerArgs field of its name), and nothing else is set
        for flag, dest in got.dests.items():
            if flag != "--config":
                assert dest == flag[2:].replace("-", "_") and dest in meaning, (name, flag, dest)
        for what, values in (("parses", got.parsed), ("resolves", got.resolved)):
            failures += [
                f"{name}: {m['field']} {what} to {m['actual']!r}, the lock means {m['expected']!r}"
                for m in server_info_mismatches(values, meaning)
            ]
        # the engine keys arrive through --config, as the fields SGLang checks requests against
        assert got.parsed["api_key"] == case.secret_digests["api_key"] != got.parsed["admin_api_key"]
        assert got.parsed["admin_api_key"] == case.secret_digests["admin_api_key"]
    assert failures == []
    assert argv_problems(reading.report, [reading.cases[n] for n in reading.meanings]) == []


def test_server_info_expectations_are_server_args_fields_with_the_parsed_value(reading: Reading) -> None:
    fields = set(reading.report.server_args_fields)
    for name in reading.meanings:
        expected, got = reading.cases[name].expected, reading.by_name[name]
        assert got.parsed is not None and got.resolved is not None
        for field, value in expected.items():
            if field in SCHEDULER_INFO_FIELDS:  # the scheduler's effective pool, beside the ServerArgs fields
                assert field not in fields
                continue
            assert field in fields, (name, field)
            assert server_info_mismatches(got.parsed, {field: value}) == [], (name, field, got.parsed.get(field), value)
            assert server_info_mismatches(got.resolved, {field: value}) == [], (name, field, got.resolved.get(field), value)


def test_the_sglang_environment_the_engine_gets_is_read_as_meant(reading: Reading) -> None:
    for name in reading.meanings:
        env = reading.by_name[name].env
        health = env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"]
        assert health.registered and health.value is False  # /health answers without a generation
        if name.startswith("cpu-"):
            assert set(env) == {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "SGLANG_USE_CPU_ENGINE"}
        else:  # nothing selects SGLang's CPU engine for a CUDA lock
            assert set(env) == {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"}


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("wrong-misspelled", "--kv-cache-dtipe is not a flag of SGLang 0.5.23"),
        ("wrong-abbreviated", "--max-queued-request is not a flag of SGLang 0.5.23"),
        ("wrong-attention-backend", "invalid choice: 'flashinfr'"),
    ],
)
def test_a_command_line_sglang_reads_otherwise_fails_naming_what(reading: Reading, case: str, named: str) -> None:
    with pytest.raises(HitchError) as caught:
        require_accepted(reading.report, [reading.cases[case]])
    assert caught.value.code == "inference_argv_rejected"
    assert named in caught.value.message
