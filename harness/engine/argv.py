"""Lock → the exact SGLang command line (DESIGN §4, spec §8.3: every serving value is explicit).

Owns the ServerArgs fields a lock sets and their values (:func:`engine_args`: one table, rendered as flags by
:func:`engine_flags` and expected back in ``/server_info`` by ``verify.py``) and which program receives them.
:class:`EngineProgram` is the executable part: the installed runtime's ``python -m sglang.launch_server`` or,
for contract runs, the fake engine ``python -m fixtures.fake_sglang`` (launched, never imported: ``harness``
does not depend on ``fixtures``). Both get the same flags, so switching engine changes only the executable.
The table is checked against SGLang's own parser and resolution in the runtime's venv (``argv_check.py``).

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
    "ArgValue",
    "EngineArg",
    "EngineKind",
    "EngineProgram",
    "engine_args",
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


ArgValue = str | int | float | bool | None

# SGLang 0.5.23 renames these deprecated ``--tool-call-parser`` names during its resolution
# (``serving_hook._handle_deprecated_args``), so ``/server_info`` would echo the new name: the engine is given
# the name it runs, the one it echoes.
_RENAMED_TOOL_CALL_PARSERS = {"qwen25": "qwen", "glm45": "glm"}


@dataclass(frozen=True)
class EngineArg:
    """One ServerArgs field the lock sets and the value it means; the flag is the field's, as SGLang names it.

    A ``bool`` is a ``store_true`` flag (passed when true); ``None`` passes nothing and leaves SGLang's default,
    which is None. ``echoed``: ``/server_info`` must report this value back (SGLang echoes every ServerArgs
    field after resolution); false where SGLang chooses the value itself (prepare's probe start)."""

    field: str
    value: ArgValue
    echoed: bool = True

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    def render(self) -> list[str]:
        if self.value is None or self.value is False:
            return []
        if self.value is True:
            return [self.flag]
        return [self.flag, str(self.value)]


def engine_args(
    lock: InferenceLockV1,
    model_dir: Path,
    host: str,
    port: int,
    *,
    probe: bool = False,
    mem_fraction: float | None = None,
) -> list[EngineArg]:
    """Every ServerArgs field ``lock`` pins, with its value; ``probe`` (prepare's first start of a draft) leaves
    the pool and prefill sizes to SGLang, which sizes them from the memory budget (``probe.py``). Every other
    start passes the sealed numbers, which the engine must reproduce. ``mem_fraction``: the budget this start
    passes instead of the lock's (a sealed CPU start's, :func:`~harness.engine.memory_budget.start_fraction`)."""
    ex = lock.execution
    platform = ex.platform
    if not isinstance(platform, CpuPlatformV1 | CudaPlatformV1):
        raise HitchError("inference_device_unsupported", f"backend {platform.backend} is not served by this version", {})
    args = [
        EngineArg("model_path", str(model_dir)),
        EngineArg("served_model_name", wire_model_name(lock.model_id)),
        EngineArg("host", host),
        EngineArg("port", port),
        EngineArg("device", platform.backend),
        EngineArg("load_format", ex.load_format),
        EngineArg("dtype", ex.dtype),
        EngineArg("kv_cache_dtype", ex.kv_cache_dtype),
        EngineArg("context_length", ex.context_tokens_per_request),
        EngineArg("max_running_requests", ex.max_running_requests),
        EngineArg("max_queued_requests", ex.max_queued_requests),
        EngineArg("attention_backend", ex.attention_backend),
        EngineArg("sampling_backend", ex.sampling_backend),
        EngineArg("random_seed", lock.generation.seed),
        EngineArg("mem_fraction_static", platform.mem_fraction_static if mem_fraction is None else mem_fraction),
        EngineArg("enable_metrics", True),
        # one JSON line per finished request on the engine's output (engine.log): its own figures (tokens, e2e and
        # first-token latency, queue entry) by request id, joined to the gateway's attempt rows (seed 004). Level 0
        # logs metadata only: never the text, the token ids or the sampling parameters.
        EngineArg("log_requests", True),
        EngineArg("log_requests_level", 0),
        EngineArg("log_requests_format", "json"),
        # the gateway frees an aborted request's permit only on a load snapshot taken after the abort
        # (gateway.slot_probe); SGLang refreshes it every 15 decode steps by default, here every step
        EngineArg("load_snapshot_publish_interval", 1),
        # probe: no pool given, and SGLang reports none as an argument (its pool is max_total_num_tokens)
        EngineArg("max_total_tokens", None if probe else ex.max_total_tokens),
        EngineArg("chunked_prefill_size", None if probe else ex.chunked_prefill_size, echoed=not probe),
        EngineArg("max_prefill_tokens", None if probe else ex.max_prefill_tokens, echoed=not probe),
        EngineArg("quantization", ex.quantization),
        EngineArg("disable_radix_cache", ex.prefix_cache.mode == "disabled"),
        EngineArg("disable_overlap_schedule", not platform.overlap_schedule),
    ]
    if isinstance(platform, CpuPlatformV1):
        # an idle scheduler waits on its sockets instead of spinning a core (it wakes when a request arrives):
        # on CPU that core is the one the gateway, the agents and a second engine need
        args.append(EngineArg("sleep_on_idle", True))
    if isinstance(platform, CudaPlatformV1):
        graphs = platform.cuda_graph == "enabled"
        args += [
            # decode graphs are captured up to the lock's batch bound, not SGLang's GPU-memory-based default
            EngineArg("cuda_graph_max_bs_decode", ex.max_running_requests if graphs else None),
            EngineArg("cuda_graph_backend_decode", None if graphs else "disabled"),
            EngineArg("cuda_graph_backend_prefill", None if graphs else "disabled"),
        ]
    args += [
        EngineArg("enable_deterministic_inference", ex.deterministic_inference),
        # An engine started without the parser answers tool calls as text while the lock claims them.
        _tool_call_parser(lock),
        EngineArg("reasoning_parser", lock.protocol.reasoning_parser),
    ]
    return args


def engine_flags(
    lock: InferenceLockV1,
    model_dir: Path,
    host: str,
    port: int,
    config_path: str,
    *,
    probe: bool = False,
    mem_fraction: float | None = None,
) -> list[str]:
    """Every SGLang flag for ``lock`` (:func:`engine_args` rendered); ``config_path`` is the secrets YAML as the
    engine sees it (``--config`` is SGLang's file merge, not a ServerArgs field)."""
    flags = ["--config", config_path]
    for arg in engine_args(lock, model_dir, host, port, probe=probe, mem_fraction=mem_fraction):
        flags += arg.render()
    return flags


def parser_flags(lock: InferenceLockV1) -> list[str]:
    """The tool-call parser flag of ``lock`` (also given to a scripted fake standing in for its engine: without
    it SGLang, and the fake, answer a tool call as text)."""
    return _tool_call_parser(lock).render()


def _tool_call_parser(lock: InferenceLockV1) -> EngineArg:
    parser = lock.protocol.tool_call_parser
    return EngineArg("tool_call_parser", _RENAMED_TOOL_CALL_PARSERS.get(parser, parser) if parser else None)
