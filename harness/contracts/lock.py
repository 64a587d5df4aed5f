"""InferenceLockV1: the sealed description of one inference service (spec §6.2).

Strict: unknown fields and backend-specific fields on the wrong backend are refused.
``inference_id = H(model_id, runtime_id, profile, execution, generation, protocol, resources)``
over canonical JSON; ports, PIDs, secrets, run ids and host paths never appear here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer

from harness.contracts.base import Record, Sha256
from harness.ids import digest_json
from harness.sglang_parsers import ToolCallParserName

__all__ = [
    "CpuPlatformV1",
    "CudaPlatformV1",
    "BENCHMARK_CONTROLS",
    "BenchmarkControl",
    "ExecutionV1",
    "GenerationV1",
    "InferenceLockV1",
    "MetalPlatformV1",
    "PlatformV1",
    "PrefixCacheV1",
    "ProfileName",
    "ProtocolV1",
    "ResourceVectorV1",
    "SamplingV1",
    "compute_inference_id",
]

ProfileName = Literal["evaluation-baseline-v1", "evaluation-throughput-v1"]

# Sampling controls a benchmark needs to fix the output length and that an agent run never sends (SGLang's
# chat request fields). A caller's value equal to SGLang's default always passes; any other value needs the
# lock's explicit permission (``GenerationV1.benchmark_controls``).
BenchmarkControl = Literal["ignore_eos", "min_tokens"]
BENCHMARK_CONTROLS: tuple[BenchmarkControl, ...] = ("ignore_eos", "min_tokens")
# Execution timeouts added after locks were first sealed: null in an older lock, left out of its document.
_LATER_TIMEOUTS = ("stream_idle_timeout_ms", "abort_confirm_timeout_ms")


class CpuPlatformV1(Record):
    backend: Literal["cpu"]
    cpu_threads: int = Field(ge=1)
    numa_policy: Literal["single-node"] = "single-node"
    cpu_feature_requirement: Literal["amx", "none"]
    mem_fraction_static: float = Field(
        gt=0,
        le=1,
        description="SGLang's static memory fraction (of one NUMA node's free RAM): the memory budget the engine sizes"
        " its token pool from at prepare; every later start passes it unchanged",
    )
    overlap_schedule: Literal[False] = False


class CudaPlatformV1(Record):
    backend: Literal["cuda"]
    device_constraint: str | None = None
    mem_fraction_static: float = Field(gt=0, le=1)
    overlap_schedule: bool
    cuda_graph: Literal["enabled", "disabled"]


class MetalPlatformV1(Record):
    """Parsed so a lock naming it gets a clear refusal, never a parse error (metal is not served by this version)."""

    backend: Literal["metal"]
    mlx_quantization: Literal["none", "prequantized"]
    overlap_schedule: bool


PlatformV1 = Annotated[CpuPlatformV1 | CudaPlatformV1 | MetalPlatformV1, Field(discriminator="backend")]


class PrefixCacheV1(Record):
    mode: Literal["disabled", "radix"]
    scope: Literal["run", "eval"]
    initial_state: Literal["empty"] = "empty"


class ExecutionV1(Record):
    platform: PlatformV1
    backend_certification: Literal["certified", "uncertified"] = Field(
        description="uncertified: a runtime the doctor never certifies; it runs only with --allow-uncertified (or the"
        " fake engine), and this lock's identity says so"
    )
    load_format: Literal["safetensors"] = "safetensors"
    dtype: Literal["bfloat16", "float16", "float32"] = Field(description="resolved; never auto")
    quantization: str | None = None
    tensor_parallel_size: Literal[1] = 1
    data_parallel_size: Literal[1] = 1
    pipeline_parallel_size: Literal[1] = 1
    context_tokens_per_request: int = Field(ge=16)
    max_running_requests: int = Field(ge=1)
    max_queued_requests: int = Field(ge=1)
    max_total_tokens: int = Field(
        ge=16, description="physical token pool: the number SGLang chose from the memory budget at prepare (sealed)"
    )
    chunked_prefill_size: int = Field(ge=-1, description="-1 disables chunked prefill; sealed from the prepare probe")
    max_prefill_tokens: int = Field(ge=1, description="sealed from the prepare probe")
    kv_cache_dtype: str
    attention_backend: str
    sampling_backend: str
    deterministic_inference: bool = False
    prefix_cache: PrefixCacheV1
    hicache: Literal[False] = False
    speculative_decoding: Literal[False] = False
    cpu_offload_gb: Literal[0] = 0
    startup_timeout_ms: int = Field(ge=1)
    queue_timeout_ms: int = Field(ge=1)
    request_timeout_ms: int = Field(ge=1)
    idle_ttl_ms: int = Field(ge=1)
    stream_idle_timeout_ms: int | None = Field(
        default=None,
        ge=1,
        description="a stream whose engine sends nothing this long is ended with a terminal error event (the wait "
        "for the first event, prefill included, counts). Null: a lock sealed before the field existed; the gateway "
        "then uses the profile default (harness.lock.STREAM_IDLE_TIMEOUT_MS). Omitted from the document when null.",
    )
    abort_confirm_timeout_ms: int | None = Field(
        default=None,
        ge=1,
        description="after the gateway abandons a request (client gone, timeout), how long the engine has to show "
        "the slot free (its running + waiting count) before the service enters fault handling. Null: the profile "
        "default (harness.lock.ABORT_CONFIRM_TIMEOUT_MS). Omitted from the document when null.",
    )

    @model_serializer(mode="wrap")
    def _omit_unset_timeouts(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        # Null means "sealed before the field existed": leaving it out keeps those locks' documents and ids.
        data: dict[str, Any] = handler(self)
        for name in _LATER_TIMEOUTS:
            if data.get(name) is None:
                data.pop(name, None)
        return data


class SamplingV1(Record):
    """The sampling values of a lock (its generation block less the budget and the override rules): what a
    generation profile sets (:mod:`harness.lock.generation`)."""

    temperature: float = Field(ge=0)
    top_p: float = Field(gt=0, le=1)
    top_k: int = Field(ge=0, description="0 = no top-k; the engine adapter maps it (SGLang: -1)")
    min_p: float = Field(ge=0, le=1)
    repetition_penalty: float = Field(gt=0)
    seed: int = Field(ge=0)

    @property
    def greedy(self) -> bool:
        """Temperature 0: every request of the same prompt decodes the same tokens (what a determinism check
        can hold the engine to); any other value samples."""
        return self.temperature == 0


class GenerationV1(SamplingV1):
    max_output_tokens: int = Field(ge=1)
    override_policy: Literal["reject-conflicts"] = "reject-conflicts"
    benchmark_controls: list[BenchmarkControl] = Field(
        default_factory=list,
        description="sampling controls a caller may set to other than SGLang's default (a benchmark lock; "
        "empty for agent runs). Digest-relevant when set; omitted from the document when empty.",
    )

    @model_serializer(mode="wrap")
    def _omit_empty_controls(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        # Empty means "no permission", the meaning every lock had before the field existed: leaving it out
        # keeps those locks' documents and inference ids unchanged.
        data: dict[str, Any] = handler(self)
        if not data.get("benchmark_controls"):
            data.pop("benchmark_controls", None)
        return data


class ProtocolV1(Record):
    api: Literal["responses", "chat-completions"]
    streaming: bool
    tool_calls: bool = Field(description="true exactly when tool_call_parser names one (SGLang returns calls as text without)")
    parallel_tool_calls: bool
    input_modalities: list[Literal["text"]] = Field(min_length=1, max_length=1)
    tool_call_parser: ToolCallParserName | None = Field(
        default=None, description="SGLang's --tool-call-parser, from the model's chat template (manifest)"
    )
    reasoning_parser: str | None = None
    compatibility_profile_id: Sha256


class ResourceVectorV1(Record):
    cpu_cores: int = Field(ge=1)
    memory_bytes: int = Field(ge=0)
    shm_bytes: int = Field(ge=0)
    gpu_count: int = Field(ge=0, le=1)
    gpu_memory_bytes: int = Field(ge=0)
    disk_bytes: int = Field(ge=0)


class InferenceLockV1(Record):
    schema_version: Literal["1"] = "1"
    engine: Literal["sglang"] = "sglang"
    model_id: Sha256
    runtime_id: Sha256
    inference_id: Sha256
    profile: ProfileName
    execution: ExecutionV1
    generation: GenerationV1
    protocol: ProtocolV1
    resources: ResourceVectorV1


def compute_inference_id(lock_fields: dict[str, Any]) -> str:
    """H(model_id, runtime_id, profile, execution, generation, protocol, resources)."""
    keys = ("model_id", "runtime_id", "profile", "execution", "generation", "protocol", "resources")
    return digest_json({k: lock_fields[k] for k in keys})
