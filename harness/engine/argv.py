"""Lock → the exact SGLang command line (DESIGN §4, spec §8.3: every serving value is explicit).

Owns the flag list and which program receives it. :class:`EngineProgram` is the executable part: the
installed runtime's ``python -m sglang.launch_server`` or, for contract runs, the fake engine
``python -m fixtures.fake_sglang`` (launched, never imported: ``harness`` does not depend on ``fixtures``).
Both get the same flags, so switching engine changes only the executable.

Secrets are not flags: the keys reach the engine through ``--config <private yaml>`` (see ``keys.py``).
``--skip-server-warmup`` is never passed: SGLang's own warmup is part of being ready.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from harness.contracts.lock import CpuPlatformV1, CudaPlatformV1, InferenceLockV1
from harness.errors import HitchError
from harness.runtimes import InstalledRuntime

__all__ = [
    "FAKE_ENGINE_MODULE",
    "EngineKind",
    "EngineProgram",
    "engine_flags",
    "parser_flags",
    "wire_model_name",
]

EngineKind = Literal["sglang", "fake"]
FAKE_ENGINE_MODULE = "fixtures.fake_sglang"


def wire_model_name(model_id: str) -> str:
    """The stable alias the engine serves the model as, derived from the model digest (spec §10.1)."""
    hex_part = model_id.split(":", 1)[-1]
    return f"local-{hex_part[:12]}"


@dataclass(frozen=True)
class EngineProgram:
    """What is executed (the flags follow ``argv``) and the runtime's own environment variables."""

    kind: EngineKind
    argv: tuple[str, ...]
    runtime_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_runtime(cls, runtime: InstalledRuntime) -> EngineProgram:
        return cls("sglang", tuple(runtime.launch_argv()), dict(runtime.env))

    @classmethod
    def fake(cls, extra_flags: tuple[str, ...] = (), python: str | None = None) -> EngineProgram:
        """The fake engine; ``extra_flags`` are its fake-only flags (``--fault``, ``--fake-*``)."""
        bad = [f for f in extra_flags if f.startswith("--") and not f.startswith(("--fault", "--fake-"))]
        if bad:
            raise HitchError("usage_error", "extra flags of the fake engine must be --fault/--fake-*", {"flags": bad})
        return cls("fake", (python or sys.executable, "-m", FAKE_ENGINE_MODULE, *extra_flags))


def engine_flags(
    lock: InferenceLockV1, model_dir: Path, host: str, port: int, config_path: str, *, probe: bool = False
) -> list[str]:
    """Every SGLang flag for ``lock``; ``config_path`` is the secrets YAML as the engine sees it. ``probe``
    (prepare's first start of a draft) leaves out the pool and prefill sizes: SGLang sizes them from the memory
    budget (``probe.py``). Every other start passes the sealed numbers, which the engine must reproduce."""
    ex = lock.execution
    platform = ex.platform
    if not isinstance(platform, CpuPlatformV1 | CudaPlatformV1):
        raise HitchError("inference_device_unsupported", f"backend {platform.backend} is refused in P0", {})
    flags = [
        "--model-path", str(model_dir),
        "--served-model-name", wire_model_name(lock.model_id),
        "--host", host,
        "--port", str(port),
        "--config", config_path,
        "--device", platform.backend,
        "--load-format", ex.load_format,
        "--dtype", ex.dtype,
        "--kv-cache-dtype", ex.kv_cache_dtype,
        "--context-length", str(ex.context_tokens_per_request),
        "--max-running-requests", str(ex.max_running_requests),
        "--max-queued-requests", str(ex.max_queued_requests),
        "--attention-backend", ex.attention_backend,
        "--sampling-backend", ex.sampling_backend,
        "--random-seed", str(lock.generation.seed),
        "--mem-fraction-static", str(platform.mem_fraction_static),
        "--enable-metrics",
    ]  # fmt: skip
    if not probe:
        flags += [
            "--max-total-tokens", str(ex.max_total_tokens),
            "--chunked-prefill-size", str(ex.chunked_prefill_size),
            "--max-prefill-tokens", str(ex.max_prefill_tokens),
        ]  # fmt: skip
    if ex.quantization is not None:
        flags += ["--quantization", ex.quantization]
    if ex.prefix_cache.mode == "disabled":
        flags.append("--disable-radix-cache")
    if not platform.overlap_schedule:
        flags.append("--disable-overlap-schedule")
    if isinstance(platform, CudaPlatformV1) and platform.cuda_graph == "disabled":
        flags += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    elif isinstance(platform, CudaPlatformV1):
        # decode graphs are captured up to the lock's batch bound, not SGLang's GPU-memory-based default
        flags += ["--cuda-graph-max-bs-decode", str(ex.max_running_requests)]
    if ex.deterministic_inference:
        flags.append("--enable-deterministic-inference")
    flags += parser_flags(lock)
    if lock.protocol.reasoning_parser is not None:
        flags += ["--reasoning-parser", lock.protocol.reasoning_parser]
    return flags


def parser_flags(lock: InferenceLockV1) -> list[str]:
    """The tool-call parser flag of ``lock`` (also given to a scripted fake standing in for its engine: without
    it SGLang, and the fake, answer a tool call as text)."""
    return ["--tool-call-parser", lock.protocol.tool_call_parser] if lock.protocol.tool_call_parser is not None else []
