#!/usr/bin/env python3
"""Service lifecycle figures through the real manager + SupervisorStarter (medians of several runs).

Per run, on a fresh root with ``fixture:tiny``:

- ``cold_acquire_s``: ``acquire()`` of a stopped service → lease (ledger, keys, argv, spawn/create, readiness
  probes, state writes); ``engine_ready_s``: the engine's own time to its first ``/health`` 200, counted from
  the moment the launcher returned; ``overhead_s = cold_acquire_s - engine_ready_s`` (what the harness adds:
  launch, ``/server_info`` check, Responses + SSE probes, ``/flush_cache``, records);
- ``warm_acquire_ms``: a second acquire on the ready service (median of 20);
- ``stop_after_ttl_s``: from (last release + idle TTL) to the manager's confirmed stop (engine gone).

Usage::

    python scripts/bench_service_lifecycle.py --engine fake --launcher process --runs 5
    python scripts/bench_service_lifecycle.py --engine fake --launcher oci --image sha256:... --runs 3
    HITCH_ROOT=<root with the runtime> python scripts/bench_service_lifecycle.py --engine sglang --runs 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.paths import HitchRoot
from harness.service.ledger import Capacity, ResourceLedger
from harness.service.manager import ServiceManager
from harness.service.starter_supervisor import EngineChoice, SupervisedService, SupervisorStarter
from tests.harness.engine.inputs import service_inputs

TTL_MS = 1000
BIG = Capacity(cpu_cores=1024, memory_bytes=1 << 50, gpu_count=0, disk_bytes=1 << 50)


async def one_run(base: Path, ckpt: Path, choice: EngineChoice, n: int) -> dict[str, float]:
    inputs = service_inputs(base / f"root-{n}", ckpt)
    if choice.engine == "sglang":
        inputs.root.runtime_envs.parent.mkdir(parents=True, exist_ok=True)
        inputs.root.runtime_envs.symlink_to(HitchRoot.at().runtime_envs)
    lock = inputs.lock
    if choice.launcher == "oci":
        res = lock.resources.model_copy(update={"memory_bytes": 512 << 20, "shm_bytes": 64 << 20, "cpu_cores": 1})
        lock = lock.model_copy(update={"resources": res})
    starter = SupervisorStarter(inputs.root, lambda _l: choice, monitor_interval_s=2.0, startup_timeout_s=600)
    manager = ServiceManager(inputs.root, starter, ResourceLedger(BIG), idle_ttl_ms=TTL_MS)
    t0 = time.monotonic()
    lease = await manager.acquire(lock, "bench-1")
    cold = time.monotonic() - t0
    service = lease.service
    assert isinstance(service, SupervisedService)
    engine_ready = float(service.readiness.health_s or 0.0)
    warm = []
    for i in range(20):
        t1 = time.monotonic()
        extra = await manager.acquire(lock, f"bench-warm-{i}")
        warm.append((time.monotonic() - t1) * 1000)
        await manager.release(extra.lease_id)
    await manager.release(lease.lease_id)
    released = time.monotonic()
    while manager.services():
        await asyncio.sleep(0.005)
    stop_after_ttl = time.monotonic() - released - TTL_MS / 1000
    return {
        "cold_acquire_s": round(cold, 3),
        "engine_ready_s": round(engine_ready, 3),
        "overhead_s": round(cold - engine_ready, 3),
        "warm_acquire_ms": round(statistics.median(warm), 3),
        "stop_after_ttl_s": round(stop_after_ttl, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=["fake", "sglang"], default="fake")
    parser.add_argument("--launcher", choices=["process", "oci"], default="process")
    parser.add_argument("--image", default=None, help="oci: the fake engine image ID")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    choice = EngineChoice(engine=args.engine, launcher=args.launcher, image=args.image)
    from fixtures.checkpoint import tiny_checkpoint_cached

    with tempfile.TemporaryDirectory(prefix="hitch-bench-life-") as tmp:
        base = Path(tmp)
        ckpt = tiny_checkpoint_cached(base / "ckpt")
        runs = [asyncio.run(one_run(base, ckpt, choice, i)) for i in range(args.runs)]
    medians = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    report = {"engine": args.engine, "launcher": args.launcher, "ttl_ms": TTL_MS, "runs": runs, "median": medians}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
