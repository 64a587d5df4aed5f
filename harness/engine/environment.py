"""The engine's environment: an allow-list built from nothing (spec §11.2).

The engine never inherits the caller's environment. Its variables are exactly:

- ``PATH`` (a minimal system path), ``HOME`` (a private per-service directory), ``LANG``;
- ``PYTHONUNBUFFERED=1`` so the engine log is written as it happens;
- ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1``: the model is a verified local directory, so the engine
  never reaches a model hub (a missing file fails instead of being fetched);
- ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0``: the supervisor's ``/health`` polls take no queue slot;
- the runtime's own variables (``SGLANG_USE_CPU_ENGINE=1``, ``PYTHONNOUSERSITE``, the shim's ``PYTHONPATH``);
- what the lock decides: ``OMP_NUM_THREADS`` = ``cpu_threads`` on CPU, ``CUDA_VISIBLE_DEVICES`` = the leased
  GPU UUID on CUDA (required: without a lease there is no CUDA engine), empty on CPU (a CPU service sees no
  GPU). Nothing on CUDA selects the CPU engine, so a CUDA lock never runs on a CPU (spec §8.1).

Cloud credentials, model-hub tokens, proxies and inherited ``SGLANG_*``/``HF_*``/``TRANSFORMERS_*``/``TORCH_*``
controls therefore never reach the engine: they are not copied, so there is nothing to scrub.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harness.contracts.lock import CpuPlatformV1, InferenceLockV1
from harness.errors import HitchError
from harness.paths import ensure_private_dir

__all__ = ["MINIMAL_PATH", "engine_environment"]

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"


def engine_environment(
    lock: InferenceLockV1,
    runtime_env: Mapping[str, str],
    home: Path,
    gpu_uuid: str | None = None,
) -> dict[str, str]:
    """The complete environment of one engine process; ``home`` is created 0700."""
    ensure_private_dir(home)
    env: dict[str, str] = {
        "PATH": MINIMAL_PATH,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    env.update(runtime_env)
    # /health answers from the server process instead of queueing a 1-token generation (reference §1): the
    # supervisor polls it every few seconds, and on a lock with max_running/max_queued 1 a generating probe
    # took a queue slot from the run and made SGLang refuse a request with "the request queue is full".
    # Generation itself is proven by readiness probes and by every request the gateway relays.
    env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] = "0"
    platform = lock.execution.platform
    if isinstance(platform, CpuPlatformV1):
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        env["OMP_NUM_THREADS"] = str(platform.cpu_threads)
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU service holds no GPU: none is visible to it
    else:
        if not gpu_uuid:  # unset, the engine would see every GPU of the machine; empty, none (a CPU run)
            raise HitchError("inference_device_unsupported", "a CUDA engine needs the GPU UUID it was leased", {})
        env["CUDA_VISIBLE_DEVICES"] = gpu_uuid
    return env
