"""Draft locks follow spec §6.2's defaults; parsing is strict; identities move only with content."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.contracts.lock import compute_inference_id
from harness.errors import HitchError
from harness.lock import (
    ABORT_CONFIRM_TIMEOUT_MS,
    STREAM_IDLE_TIMEOUT_MS,
    build_lock,
    claims_parallel_tool_calls,
    validate_lock,
)
from tests.harness.lock_inputs import model_manifest, runtime_manifest


def _lock_dict(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"device": "cpu", "profile": "baseline", "cpu_cores_per_node": 2}
    args.update(kw)
    rt = runtime_manifest(args["device"])
    return build_lock(model_manifest(), rt, **args).to_json_dict()


def test_baseline_cpu_defaults_match_the_spec_table() -> None:
    lock = validate_lock(_lock_dict())
    ex, gen = lock.execution, lock.generation
    assert lock.profile == "evaluation-baseline-v1"
    assert ex.context_tokens_per_request == 8192
    assert ex.max_running_requests == 1 and ex.max_queued_requests == 1
    assert ex.prefix_cache.mode == "disabled"
    assert (gen.temperature, gen.top_p, gen.top_k, gen.min_p, gen.repetition_penalty, gen.seed) == (0, 1, 0, 0, 1, 0)
    assert gen.max_output_tokens == 2048
    assert ex.platform.backend == "cpu" and ex.platform.cpu_threads == 2
    assert (ex.queue_timeout_ms, ex.startup_timeout_ms, ex.request_timeout_ms, ex.idle_ttl_ms) == (
        60_000,
        600_000,
        600_000,
        60_000,
    )
    assert ex.dtype == "bfloat16"
    assert lock.resources.gpu_count == 0


def test_throughput_profiles_by_device() -> None:
    cpu = validate_lock(_lock_dict(profile="throughput"))
    assert cpu.execution.max_running_requests == 2 and cpu.execution.prefix_cache.mode == "radix"
    cuda = validate_lock(_lock_dict(device="cuda", profile="throughput"))
    assert cuda.execution.max_running_requests == 8
    assert cuda.execution.platform.backend == "cuda" and cuda.execution.platform.mem_fraction_static == 0.80


def test_context_is_capped_by_the_model_and_threads_by_the_numa_node() -> None:
    small = build_lock(
        model_manifest(max_positions=2048), runtime_manifest(), device="cpu", profile="baseline", cpu_cores_per_node=32
    )
    assert small.execution.context_tokens_per_request == 2048
    assert small.generation.max_output_tokens == 512
    assert small.execution.platform.backend == "cpu" and small.execution.platform.cpu_threads == 8
    with pytest.raises(HitchError) as exc:
        build_lock(
            model_manifest(max_positions=2048),
            runtime_manifest(),
            device="cpu",
            profile="baseline",
            cpu_cores_per_node=2,
            context_tokens=4096,
        )
    assert exc.value.code == "inference_lock_invalid"


def test_draft_lock_is_deterministic() -> None:
    assert _lock_dict() == _lock_dict()


def test_metal_parses_but_is_refused() -> None:
    with pytest.raises(HitchError) as exc:
        build_lock(model_manifest(), runtime_manifest(), device="metal", profile="baseline", cpu_cores_per_node=2)
    assert exc.value.code == "inference_device_unsupported"
    data = _lock_dict()
    data["execution"]["platform"] = {"backend": "metal", "mlx_quantization": "none", "overlap_schedule": False}
    data["inference_id"] = compute_inference_id(data)
    with pytest.raises(HitchError) as exc:
        validate_lock(data)
    assert exc.value.code == "inference_device_unsupported"


def test_unpinned_runtime_and_wrong_backend_are_refused() -> None:
    with pytest.raises(HitchError) as exc:
        build_lock(model_manifest(), runtime_manifest(pinned=False), device="cpu", profile="baseline", cpu_cores_per_node=2)
    assert exc.value.code == "inference_runtime_unpinned"
    with pytest.raises(HitchError) as exc:
        build_lock(model_manifest(), runtime_manifest("cuda"), device="cpu", profile="baseline", cpu_cores_per_node=2)
    assert exc.value.code == "inference_device_unsupported"


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: d.update(extra_field=1), id="unknown-top-level-field"),
        pytest.param(lambda d: d["execution"].update(gpu_layers=3), id="unknown-execution-field"),
        pytest.param(lambda d: d["execution"]["platform"].update(cuda_graph="enabled"), id="cuda-field-on-cpu"),
        pytest.param(lambda d: d["execution"].update(dtype="auto"), id="unresolved-dtype"),
        pytest.param(lambda d: d["execution"].update(tensor_parallel_size=2), id="tp-2"),
        pytest.param(lambda d: d["generation"].update(override_policy="allow"), id="override-policy"),
        pytest.param(lambda d: d["protocol"].update(input_modalities=["text", "image"]), id="image-modality"),
        pytest.param(lambda d: d["execution"].update(max_total_tokens=100), id="pool-below-context"),
        pytest.param(lambda d: d["execution"].update(max_running_requests=4, max_queued_requests=4), id="baseline-p4"),
        pytest.param(lambda d: d["execution"].update(deterministic_inference=True), id="deterministic-on-cpu"),
    ],
)
def test_strict_parsing_refuses(mutate: Any) -> None:
    data = _lock_dict()
    mutate(data)
    data["inference_id"] = compute_inference_id({**data})
    with pytest.raises(HitchError) as exc:
        validate_lock(data)
    assert exc.value.code == "inference_lock_invalid"


def _deterministic_cuda(profile: str, sampling: str) -> dict[str, Any]:
    data = _lock_dict(device="cuda", profile=profile)
    data["execution"].update(deterministic_inference=True, sampling_backend=sampling)
    data["inference_id"] = compute_inference_id(data)
    return data


def test_deterministic_inference_on_cuda_is_refused_where_sglang_would_echo_other_values() -> None:
    # SGLang 0.5.23 resolves deterministic inference to pytorch sampling and, on flashinfer attention, no radix
    # cache: /server_info would echo those, never the lock's values (found by SGLang's resolution, argv_check)
    lock = validate_lock(_deterministic_cuda("baseline", "pytorch"))
    assert lock.execution.deterministic_inference and lock.execution.attention_backend == "flashinfer"
    with pytest.raises(HitchError) as flashinfer_sampling:
        validate_lock(_deterministic_cuda("baseline", "flashinfer"))
    assert flashinfer_sampling.value.details["problems"] == [
        "deterministic_inference samples with the pytorch backend (SGLang replaces any other)"
    ]
    with pytest.raises(HitchError) as radix:
        validate_lock(_deterministic_cuda("throughput", "pytorch"))
    assert radix.value.code == "inference_lock_invalid"
    assert "disables the radix cache on the flashinfer attention backend" in radix.value.message


def test_a_tampered_inference_id_is_refused() -> None:
    data = _lock_dict()
    data["generation"]["seed"] = 7
    with pytest.raises(HitchError) as exc:
        validate_lock(data)
    assert exc.value.code == "inference_lock_invalid"
    assert "inference_id" in exc.value.message


def _leaf_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaf_paths(v, (*prefix, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaf_paths(v, (*prefix, i))]
    return [prefix]


_BASE = _lock_dict()
_SECTIONS = ("execution", "generation", "protocol", "resources")
_PATHS = [p for s in _SECTIONS for p in _leaf_paths(_BASE[s], (s,))] + [("model_id",), ("runtime_id",), ("profile",)]


def _bump(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if value is None:
        return "x"
    return str(value) + "x"


@settings(max_examples=60)
@given(st.sampled_from(_PATHS))
def test_any_identity_field_change_moves_inference_id(path: tuple[Any, ...]) -> None:
    data = copy.deepcopy(_BASE)
    node: Any = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = _bump(node[path[-1]])
    assert compute_inference_id(data) != _BASE["inference_id"]


@settings(max_examples=30)
@given(st.sampled_from(["verified", "user-declared", "unknown"]), st.one_of(st.none(), st.text(max_size=20)))
def test_provenance_never_moves_model_id_or_inference_id(source: str, license_: str | None) -> None:
    base = model_manifest()
    other = type(base).model_validate({**base.to_json_dict(), "provenance": {"source": source, "license": license_}})
    rt = runtime_manifest()
    a = build_lock(base, rt, device="cpu", profile="baseline", cpu_cores_per_node=2)
    b = build_lock(other, rt, device="cpu", profile="baseline", cpu_cores_per_node=2)
    assert other.model_id == base.model_id
    assert a.inference_id == b.inference_id


def test_a_benchmark_lock_permits_the_controls_under_its_own_inference_id() -> None:
    plain = build_lock(model_manifest(), runtime_manifest(), device="cpu", profile="baseline", cpu_cores_per_node=2)
    bench = build_lock(
        model_manifest(), runtime_manifest(), device="cpu", profile="baseline", cpu_cores_per_node=2, benchmark=True
    )
    assert bench.generation.benchmark_controls == ["ignore_eos", "min_tokens"]
    assert plain.generation.benchmark_controls == []
    assert "benchmark_controls" not in plain.to_json_dict()["generation"]  # earlier locks keep their ids
    assert bench.inference_id != plain.inference_id
    assert validate_lock(bench.to_json_dict()) == bench
    twice = copy.deepcopy(bench.to_json_dict())
    twice["generation"]["benchmark_controls"] = ["ignore_eos", "ignore_eos"]
    twice["inference_id"] = compute_inference_id(twice)
    with pytest.raises(HitchError) as info:
        validate_lock(twice)
    assert info.value.code == "inference_lock_invalid"
    unknown = copy.deepcopy(bench.to_json_dict())
    unknown["generation"]["benchmark_controls"] = ["logit_bias"]
    with pytest.raises(HitchError) as info:
        validate_lock(unknown)
    assert info.value.code == "inference_lock_invalid"


def test_a_pre_quantized_checkpoint_is_refused_without_a_certified_method() -> None:
    manifest = model_manifest()
    data = manifest.to_json_dict()
    data["architecture"]["quantization"] = "fp8"
    quantized = type(manifest).model_validate(data)
    with pytest.raises(HitchError) as exc:
        build_lock(quantized, runtime_manifest(), device="cpu", profile="baseline", cpu_cores_per_node=2)
    assert exc.value.code == "inference_quantization_uncertified"
    assert exc.value.details == {"quantization": "fp8", "certified": []}


def test_the_lock_names_the_templates_parser_and_claims_tool_calls_only_with_it() -> None:
    rt = runtime_manifest()
    with_parser = build_lock(model_manifest(), rt, device="cpu", profile="baseline", cpu_cores_per_node=2)
    assert with_parser.protocol.tool_call_parser == "hermes" and with_parser.protocol.tool_calls is True
    without = build_lock(model_manifest(tool_call_parser=None), rt, device="cpu", profile="baseline", cpu_cores_per_node=2)
    assert without.protocol.tool_call_parser is None and without.protocol.tool_calls is False
    # the parser is the serving choice, not the checkpoint: same model_id, another inference id
    assert without.model_id == with_parser.model_id and without.inference_id != with_parser.inference_id
    validate_lock(without.to_json_dict())


@pytest.mark.parametrize(("tool_calls", "parser"), [(True, None), (False, "hermes")])
def test_tool_calls_and_the_parser_must_agree(tool_calls: bool, parser: str | None) -> None:
    data = _lock_dict()
    data["protocol"] = {**data["protocol"], "tool_calls": tool_calls, "tool_call_parser": parser}
    data["inference_id"] = compute_inference_id(data)
    with pytest.raises(HitchError) as err:
        validate_lock(data)
    assert err.value.code == "inference_lock_invalid" and "tool_call_parser" in err.value.message


def test_a_parser_the_pinned_sglang_lacks_is_refused() -> None:
    data = _lock_dict()
    data["protocol"] = {**data["protocol"], "tool_call_parser": "hermes2"}
    data["inference_id"] = compute_inference_id(data)
    with pytest.raises(HitchError) as err:
        validate_lock(data)
    assert err.value.code == "inference_lock_invalid"


def test_a_parser_that_hands_back_several_calls_makes_the_lock_claim_parallel_tool_calls() -> None:
    hermes = build_lock(model_manifest(), runtime_manifest(), device="cpu", profile="baseline", cpu_cores_per_node=2)
    assert (hermes.protocol.tool_call_parser, hermes.protocol.parallel_tool_calls) == ("hermes", True)
    assert claims_parallel_tool_calls("hermes") and not claims_parallel_tool_calls(None)
    assert not claims_parallel_tool_calls("gpt-oss")  # not read to hand back several calls: one call per turn
    data = copy.deepcopy(hermes.to_json_dict())
    data["protocol"].update(tool_call_parser=None, tool_calls=False, parallel_tool_calls=True)
    data["inference_id"] = compute_inference_id(data)
    with pytest.raises(HitchError) as info:
        validate_lock(data)
    assert "parallel_tool_calls" in info.value.message


def test_the_idle_and_abort_timeouts_are_profile_defaults_and_older_locks_keep_their_ids() -> None:
    lock = build_lock(model_manifest(), runtime_manifest(), device="cpu", profile="baseline", cpu_cores_per_node=2)
    assert (lock.execution.stream_idle_timeout_ms, lock.execution.abort_confirm_timeout_ms) == (
        STREAM_IDLE_TIMEOUT_MS,
        ABORT_CONFIRM_TIMEOUT_MS,
    )
    older = copy.deepcopy(lock.to_json_dict())  # a lock sealed before the fields existed
    del older["execution"]["stream_idle_timeout_ms"], older["execution"]["abort_confirm_timeout_ms"]
    older["inference_id"] = compute_inference_id(older)
    parsed = validate_lock(older)  # still valid, under the id it was sealed with
    assert parsed.execution.stream_idle_timeout_ms is None and parsed.inference_id == older["inference_id"]
    assert "stream_idle_timeout_ms" not in parsed.to_json_dict()["execution"]
    assert parsed.inference_id != lock.inference_id
