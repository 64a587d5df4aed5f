"""Profiles → draft ``InferenceLockV1`` and strict lock validation (spec §6.2).

The defaults are the table of spec §6.2, not SGLang's own defaults. A draft lock is a
pure function of (model manifest, runtime manifest, device, profile, cores of one NUMA
node, optional context): nothing starts and no machine-specific identity (UUIDs,
driver, ports) enters it. The token pool and prefill sizes of a draft are placeholders
(the pool: one full-context request); ``local prepare`` starts the engine with the
memory budget alone and seals the numbers SGLang chose (``harness/engine/probe.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from harness.contracts.base import parse_record
from harness.contracts.lock import (
    BENCHMARK_CONTROLS,
    CpuPlatformV1,
    CudaPlatformV1,
    ExecutionV1,
    GenerationV1,
    InferenceLockV1,
    PrefixCacheV1,
    ProfileName,
    ProtocolV1,
    ResourceVectorV1,
    SamplingV1,
    compute_inference_id,
)
from harness.contracts.model import LocalModelManifestV1
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.errors import HitchError
from harness.ids import digest_json
from harness.lock.generation import DEFAULT_GENERATION
from harness.sglang_parsers import PARALLEL_TOOL_CALL_PARSERS

__all__ = [
    "ABORT_CONFIRM_TIMEOUT_MS",
    "CERTIFIED_QUANTIZATIONS",
    "CPU_MEM_FRACTION_STATIC",
    "DEFAULT_CONTEXT_TOKENS",
    "PROFILES",
    "SERVED_DEVICES",
    "Device",
    "ProfileShort",
    "ServedDevice",
    "STREAM_IDLE_TIMEOUT_MS",
    "build_lock",
    "claims_parallel_tool_calls",
    "profile_name",
    "resolve_dtype",
    "served_device",
    "validate_lock",
]

Device = Literal["cpu", "cuda", "metal"]  # what a lock can name: metal parses, and is refused (served_device)
ServedDevice = Literal["cpu", "cuda"]
SERVED_DEVICES: tuple[ServedDevice, ...] = ("cpu", "cuda")
ProfileShort = Literal["baseline", "throughput"]

PROFILES: dict[str, ProfileName] = {
    "baseline": "evaluation-baseline-v1",
    "throughput": "evaluation-throughput-v1",
}

DEFAULT_CONTEXT_TOKENS = 8192
# The pre-quantized checkpoint methods (config.json ``quant_method``) a lock may pass to SGLang's
# ``--quantization``; a method enters only with a certification that ran on it. None has yet.
CERTIFIED_QUANTIZATIONS: frozenset[str] = frozenset()
# On a CPU, SGLang sizes the token pool from this fraction of one NUMA node's free RAM (minus what the weights
# took); a small value keeps it from reserving most of the node. Prepare seals the pool it yields.
CPU_MEM_FRACTION_STATIC = 0.05
# SGLang 0.5.23's deterministic inference keeps the radix cache only on these attention backends and runs the
# pytorch sampling backend whatever is asked (``attention_hook.handle_deterministic_inference``): a lock that
# says otherwise would be echoed back changed by ``/server_info`` and never become ready.
_RADIX_DETERMINISTIC_ATTENTION = frozenset({"ascend", "fa3", "fa4", "triton"})
# Both profiles (spec §9.2). A stream may be silent this long before the gateway ends it. A short "no token yet" is
# never a fault: the wait for the first event holds the whole prefill (minutes for a full-context CPU prefill of a
# large model), and SGLang 0.5.23 holds back a Responses message's events while tools are declared, so an agent's
# whole generation can be silent. No default below the request timeout is safe for every model and machine; a
# lock may seal a shorter one (the certification's fault check does).
STREAM_IDLE_TIMEOUT_MS = 600_000
# How long an engine has to show an abandoned request's slot free (SGLang processes an abort at its next scheduler
# step, after the batch in flight: a long CPU prefill chunk can take many seconds) before the service is faulted.
ABORT_CONFIRM_TIMEOUT_MS = 30_000
_MAX_OUTPUT_CAP = 2048
_GIB = 1 << 30
_MIB = 1 << 20

# The protocol surface every lock of this version enables; its digest names the compatibility profile.
_PROTOCOL_PROFILE = {"engine": "sglang", "profile": "openai-responses-text-v1", "input_modalities": ["text"]}

_DTYPE_ALIASES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}


def served_device(device: str) -> ServedDevice:
    """``device`` when this version serves it. Metal (a lock may name it, spec §5) and any other name are
    ``inference_device_unsupported``: the one place that refuses them."""
    for served in SERVED_DEVICES:
        if device == served:
            return served
    why = "metal parses but is not served by this version" if device == "metal" else f"unknown device {device!r}"
    raise HitchError("inference_device_unsupported", why, {"device": device, "choices": [*SERVED_DEVICES, "metal"]})


def profile_name(short: str) -> ProfileName:
    try:
        return PROFILES[short]
    except KeyError:
        raise HitchError("usage_error", f"unknown profile {short!r}", {"choices": sorted(PROFILES)}) from None


def resolve_dtype(torch_dtype: str | None) -> Literal["bfloat16", "float16", "float32"]:
    """The checkpoint's dtype made explicit; ``auto`` never reaches a lock."""
    if torch_dtype is None or torch_dtype == "auto":
        return "bfloat16"
    resolved = _DTYPE_ALIASES.get(torch_dtype.lower())
    if resolved == "bfloat16":
        return "bfloat16"
    if resolved == "float16":
        return "float16"
    if resolved == "float32":
        return "float32"
    raise HitchError("local_model_invalid", f"unsupported torch_dtype {torch_dtype!r}", {"torch_dtype": torch_dtype})


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def _context_tokens(model: LocalModelManifestV1, requested: int | None) -> int:
    model_max = model.architecture.max_position_embeddings
    if requested is None:
        return min(DEFAULT_CONTEXT_TOKENS, model_max) if model_max else DEFAULT_CONTEXT_TOKENS
    if requested < 16:
        raise HitchError("usage_error", "context must be at least 16 tokens", {"context": requested})
    if model_max is not None and requested > model_max:
        raise HitchError(
            "inference_lock_invalid",
            f"context {requested} exceeds the model's max_position_embeddings {model_max}",
            {"context": requested, "max_position_embeddings": model_max},
        )
    return requested


def _max_running(device: Device, profile: ProfileShort) -> int:
    if profile == "baseline":
        return 1
    return 8 if device == "cuda" else 2


def _resources(
    device: Device, model: LocalModelManifestV1, cpu_threads: int, pool_tokens: int, dtype_bytes: int
) -> ResourceVectorV1:
    weights = model.weights.total_tensor_bytes
    layers = model.architecture.num_hidden_layers or 1
    hidden = model.architecture.hidden_size or 1
    # Upper bound (MHA): K and V per layer per token; GQA models need less.
    kv_bytes = 2 * layers * hidden * dtype_bytes * pool_tokens
    disk = sum(f.size for f in model.files)
    if device == "cuda":
        return ResourceVectorV1(
            cpu_cores=4,
            memory_bytes=_round_up(4 * _GIB + weights, _MIB),
            shm_bytes=_GIB,
            gpu_count=1,
            gpu_memory_bytes=_round_up(weights + kv_bytes, _MIB),
            disk_bytes=disk,
        )
    return ResourceVectorV1(
        cpu_cores=cpu_threads,
        memory_bytes=_round_up(3 * _GIB + weights + kv_bytes, _MIB),
        shm_bytes=256 * _MIB,
        gpu_count=0,
        gpu_memory_bytes=0,
        disk_bytes=disk,
    )


def claims_parallel_tool_calls(parser: str | None) -> bool:
    """A lock claims parallel tool calls exactly when its tool-call parser hands back every call of an answer."""
    return parser is not None and parser in PARALLEL_TOOL_CALL_PARSERS


def build_lock(
    model: LocalModelManifestV1,
    runtime: InferenceRuntimeManifestV1,
    *,
    device: Device,
    profile: ProfileShort,
    cpu_cores_per_node: int,
    context_tokens: int | None = None,
    benchmark: bool = False,
    sampling: SamplingV1 | None = None,
) -> InferenceLockV1:
    """The draft lock for this model + runtime + device + profile (spec §6.2 defaults). ``benchmark`` permits
    the benchmark sampling controls (``ignore_eos``, ``min_tokens``: fixed output lengths for the field's
    benchmark tools); an agent run's lock never sets it, and it changes the inference id. ``sampling`` is a
    generation profile's (:mod:`harness.lock.generation`; default greedy, the spec's): part of the inference id."""
    device = served_device(device)
    if runtime.backend != device:
        raise HitchError(
            "inference_device_unsupported",
            f"runtime {runtime.name} is for {runtime.backend}, not {device}",
            {"runtime": runtime.name, "device": device},
        )
    if not runtime.pinned:
        raise HitchError(
            "inference_runtime_unpinned",
            f"runtime {runtime.name} has no pinned digest; a lock never names a tag",
            {"runtime": runtime.name},
        )
    quantization = model.architecture.quantization
    if quantization is not None and quantization not in CERTIFIED_QUANTIZATIONS:
        # spec §2.2: no implicit quantization; a pre-quantized checkpoint runs only with a certified method
        raise HitchError(
            "inference_quantization_uncertified",
            f"the checkpoint is pre-quantized ({quantization}) and no quantization method is certified; "
            "import an unquantized checkpoint",
            {"quantization": quantization, "certified": sorted(CERTIFIED_QUANTIZATIONS)},
        )
    if cpu_cores_per_node < 1:
        raise HitchError("inference_capacity_exceeded", "no CPU core available on one NUMA node", {"cores": cpu_cores_per_node})

    context = _context_tokens(model, context_tokens)
    running = _max_running(device, profile)
    dtype = resolve_dtype(model.architecture.torch_dtype)
    dtype_bytes = 4 if dtype == "float32" else 2
    # Only the resource estimate assumes every running request at full context; the token pool is not derived
    # (spec §6.2): the draft names the floor (one full-context request) and prepare seals what SGLang chose.
    kv_estimate_tokens = context * running
    cpu_threads = min(8, cpu_cores_per_node)

    platform: CpuPlatformV1 | CudaPlatformV1
    if device == "cpu":
        amx = runtime.cpu_feature_requirement == "amx"
        platform = CpuPlatformV1(
            backend="cpu",
            cpu_threads=cpu_threads,
            cpu_feature_requirement="amx" if amx else "none",
            mem_fraction_static=CPU_MEM_FRACTION_STATIC,
        )
        attention, sampler, chunk = ("intel_amx" if amx else "torch_native"), "pytorch", 2048
    else:
        platform = CudaPlatformV1(backend="cuda", mem_fraction_static=0.80, overlap_schedule=True, cuda_graph="enabled")
        attention, sampler, chunk = "flashinfer", "flashinfer", 8192

    execution = ExecutionV1(
        platform=platform,
        backend_certification="certified" if runtime.certifiable else "uncertified",
        dtype=dtype,
        quantization=quantization,
        context_tokens_per_request=context,
        max_running_requests=running,
        max_queued_requests=running,
        max_total_tokens=context,
        chunked_prefill_size=min(chunk, context),
        max_prefill_tokens=max(context, 16384),
        kv_cache_dtype="auto",
        attention_backend=attention,
        sampling_backend=sampler,
        prefix_cache=PrefixCacheV1(
            mode="disabled" if profile == "baseline" else "radix",
            scope="run" if profile == "baseline" else "eval",
        ),
        startup_timeout_ms=600_000,
        queue_timeout_ms=60_000,
        request_timeout_ms=600_000,
        idle_ttl_ms=60_000,
        stream_idle_timeout_ms=STREAM_IDLE_TIMEOUT_MS,
        abort_confirm_timeout_ms=ABORT_CONFIRM_TIMEOUT_MS,
    )
    generation = GenerationV1(
        **(sampling or DEFAULT_GENERATION.sampling).model_dump(),
        max_output_tokens=min(_MAX_OUTPUT_CAP, context // 4),
        benchmark_controls=list(BENCHMARK_CONTROLS) if benchmark else [],
    )
    # Without a parser SGLang hands a tool call back as message text: the lock claims tool calls only with one.
    parser = model.chat_template.tool_call_parser
    protocol = ProtocolV1(
        api="responses",
        streaming=True,
        tool_calls=parser is not None,
        tool_call_parser=parser,
        parallel_tool_calls=claims_parallel_tool_calls(parser),
        input_modalities=["text"],
        compatibility_profile_id=digest_json(_PROTOCOL_PROFILE),
    )
    fields: dict[str, Any] = {
        "schema_version": "1",
        "engine": "sglang",
        "model_id": model.model_id,
        "runtime_id": runtime.runtime_id,
        "profile": profile_name(profile),
        "execution": execution.to_json_dict(),
        "generation": generation.to_json_dict(),
        "protocol": protocol.to_json_dict(),
        "resources": _resources(device, model, cpu_threads, kv_estimate_tokens, dtype_bytes).to_json_dict(),
    }
    fields["inference_id"] = compute_inference_id(fields)
    return InferenceLockV1.model_validate(fields)


def validate_lock(data: Any) -> InferenceLockV1:
    """Strictly parse a lock document: unknown fields, cross-backend fields, a wrong
    ``inference_id`` and impossible combinations are refused; metal parses but is refused."""
    lock = parse_record(InferenceLockV1, data, "inference_lock_invalid")
    ex = lock.execution
    served_device(ex.platform.backend)
    expected = compute_inference_id(lock.to_json_dict())
    if expected != lock.inference_id:
        raise HitchError(
            "inference_lock_invalid",
            "inference_id does not match the lock's content",
            {"inference_id": lock.inference_id, "computed": expected},
        )
    problems: list[str] = []
    if ex.max_total_tokens < ex.context_tokens_per_request:
        problems.append("max_total_tokens cannot hold one full-context request")
    if ex.max_queued_requests > ex.max_running_requests:
        problems.append("max_queued_requests exceeds max_running_requests")
    if len(set(lock.generation.benchmark_controls)) != len(lock.generation.benchmark_controls):
        problems.append("benchmark_controls names a control twice")
    if lock.generation.max_output_tokens >= ex.context_tokens_per_request:
        problems.append("max_output_tokens must be below the context")
    if lock.protocol.tool_calls != (lock.protocol.tool_call_parser is not None):
        problems.append("tool_calls is true exactly when a tool_call_parser is named")
    if lock.protocol.parallel_tool_calls and not claims_parallel_tool_calls(lock.protocol.tool_call_parser):
        problems.append("parallel_tool_calls needs a tool_call_parser that hands back several calls")
    if ex.deterministic_inference and ex.platform.backend == "cpu":
        problems.append("deterministic_inference is refused on cpu (SGLang rejects it at startup)")
    if ex.deterministic_inference and ex.sampling_backend != "pytorch":
        problems.append("deterministic_inference samples with the pytorch backend (SGLang replaces any other)")
    if (
        ex.deterministic_inference
        and ex.prefix_cache.mode == "radix"
        and ex.attention_backend not in _RADIX_DETERMINISTIC_ATTENTION
    ):
        problems.append(
            f"deterministic_inference disables the radix cache on the {ex.attention_backend} attention backend (SGLang"
            f" keeps it only on {', '.join(sorted(_RADIX_DETERMINISTIC_ATTENTION))})"
        )
    if lock.profile == "evaluation-baseline-v1" and (ex.prefix_cache.mode != "disabled" or ex.max_running_requests != 1):
        problems.append("the baseline profile runs one request at a time with the prefix cache disabled")
    if isinstance(ex.platform, CpuPlatformV1) and lock.resources.gpu_count != 0:
        problems.append("a cpu lock has no GPU allocation")
    if problems:
        raise HitchError("inference_lock_invalid", "; ".join(problems), {"problems": problems})
    return lock
