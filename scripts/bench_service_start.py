#!/usr/bin/env python3
"""Cold-start overhead of the harness over the engine's own ready time (process or oci launcher).

For each run: a fresh supervisor starts the engine (fake or real SGLang) for ``fixture:tiny`` and waits for
readiness. ``engine_ready_s`` is spawn → first ``/health`` 200 (the engine's own startup and warmup, polled
every 100 ms); ``total_s`` is ``start()`` → ready (keys, argv/env, spawn, health, ``/server_info`` check,
Responses + SSE probes, ``/flush_cache``, state writes). ``overhead_s = total_s - engine_ready_s``.
``idle_wait_s`` is how long readiness waited for the engine to report no running or waiting request before it
flushed the cache, ``busy_polls`` how often it found the engine busy. A start that fails is recorded with its
error code and step (``--keep-going``: the next run starts anyway), so a series counts how many became ready.
Prints JSON with every run and the medians. Usage::

    python scripts/bench_service_start.py --engine fake --runs 3
    python scripts/bench_service_start.py --engine sglang --runs 20 --keep-going   # does every start become ready?
    python scripts/bench_service_start.py --engine fake --launcher oci --image sha256:... --runs 3
    python scripts/bench_service_start.py --engine sglang --launcher oci --image sha256:... --runs 20 --keep-going
    HITCH_ROOT=... python scripts/bench_service_start.py --engine sglang --runs 3
    python scripts/bench_service_start.py --engine sglang --runs 20 --keep-going --busy-beside   # under load

``--busy-beside`` starts one more engine of the same kind (process launcher, its own root) before the runs and
keeps it generating (one long request after another, ``ignore_eos``) until they end: every start then races
another engine's work for the machine's cores. The summary says how many requests that engine answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.engine import EngineProgram
from harness.engine.launch_spec import Launcher
from harness.errors import HitchError
from harness.launch.oci import OciLauncher
from harness.launch.process import ProcessLauncher
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, require_installed
from harness.service import ServiceSupervisor
from harness.service.starter_supervisor import EngineChoice, engine_program
from tests.harness.engine.inputs import GENERIC_RUNTIME, service_inputs


async def one_run(base: Path, ckpt: Path, program: EngineProgram, n: int, image: str | None) -> dict[str, float | str]:
    inputs = service_inputs(base / f"root-{n}", ckpt)
    lock = inputs.lock
    launcher: Launcher = ProcessLauncher()
    if image is not None:
        if program.kind == "fake":  # a container needs a memory limit; 512 MiB is ample for the fake engine
            resources = lock.resources.model_copy(update={"memory_bytes": 512 << 20, "cpu_cores": 1})
            lock = lock.model_copy(update={"resources": resources})
        launcher = OciLauncher(inputs.root.path)
        program = engine_program(inputs.root, lock, EngineChoice(engine=program.kind, launcher="oci", image=image))
    sup = ServiceSupervisor(
        inputs.root,
        f"bench-{n}",
        lock,
        inputs.model_dir,
        program,
        launcher,
        owner="bench",
        startup_timeout_s=600,
        image=image,
        host="0.0.0.0" if image is not None else "127.0.0.1",  # a container's engine listens on its network
    )
    t0 = time.monotonic()
    try:
        endpoint = await sup.start()
    except HitchError as exc:
        return {
            "error": exc.code,
            "step": str(exc.details.get("step")),
            "message": exc.message,
            "after_s": round(time.monotonic() - t0, 3),
        }
    total = time.monotonic() - t0
    t1 = time.monotonic()
    await sup.stop()
    stop_s = time.monotonic() - t1
    ready = next(e for e in sup.store.events() if e.event == "inference.ready")
    engine_ready = float(endpoint.readiness.health_s or 0.0)
    rep = endpoint.readiness
    return {
        "total_s": round(total, 3),
        "engine_ready_s": round(engine_ready, 3),
        "overhead_s": round(total - engine_ready, 3),
        "probes_s": round((rep.flushed_s or 0.0) - engine_ready, 3),
        "event_ready_s": float(ready.details["ready_s"]),
        "idle_wait_s": float(rep.idle_wait_s or 0.0),
        "busy_polls": rep.busy_polls,
        "flush_attempts": rep.flush_attempts,
        "stop_s": round(stop_s, 3),
    }


class BusyEngine:
    """Another engine on the machine, kept generating on a thread until :meth:`stop` (``--busy-beside``)."""

    def __init__(self, base: Path, ckpt: Path, program: EngineProgram) -> None:
        inputs = service_inputs(base / "root-busy", ckpt)
        self.sup = ServiceSupervisor(
            inputs.root, "bench-busy", inputs.lock, inputs.model_dir, program, ProcessLauncher(), owner="bench",
            startup_timeout_s=600,
        )  # fmt: skip
        self.answered = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> None:
        """Start the engine and its request loop on a thread of their own (one event loop for both)."""
        ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve(ready)), daemon=True)
        self._thread.start()
        if not ready.wait(600) or self.error is not None:
            raise SystemExit(f"the busy engine did not start: {self.error}")

    async def _serve(self, ready: threading.Event) -> None:
        import httpx

        try:
            endpoint = await self.sup.start()
        except Exception as exc:  # reported by start()
            self.error = repr(exc)
            ready.set()
            return
        ready.set()
        body = {"text": "Count from one to ten thousand:", "sampling_params": {"max_new_tokens": 512, "ignore_eos": True}}
        headers = {"Authorization": f"Bearer {endpoint.keys.api_key}"}
        try:
            async with httpx.AsyncClient(base_url=endpoint.base_url, headers=headers, timeout=600, trust_env=False) as client:
                while not self._stop.is_set():
                    try:
                        ok = (await client.post("/generate", json=body)).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    self.answered += ok
                    self.failed += not ok
        finally:
            await self.sup.stop()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(900)
        return {"answered": self.answered, "failed": self.failed}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=["fake", "sglang"], default="fake")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--launcher", choices=["process", "oci"], default="process")
    parser.add_argument("--image", help="oci: the pinned image (the fake engine image's ID for --engine fake)")
    parser.add_argument("--keep-going", action="store_true", help="record a failed start and go on with the next run")
    parser.add_argument("--busy-beside", action="store_true", help="keep another engine generating while the runs start")
    args = parser.parse_args()
    image = args.image if args.launcher == "oci" else None
    if args.launcher == "oci" and image is None:
        parser.error("--launcher oci needs --image")
    if args.engine == "fake":
        program = EngineProgram.fake()
    else:
        program = EngineProgram.from_runtime(require_installed(HitchRoot.at(), get_runtime(GENERIC_RUNTIME)))
    from fixtures.checkpoint import tiny_checkpoint_cached

    with tempfile.TemporaryDirectory(prefix="hitch-bench-start-") as tmp:
        base = Path(tmp)
        ckpt = tiny_checkpoint_cached(base / "ckpt")
        runs: list[dict[str, float | str]] = []
        busy = BusyEngine(base, ckpt, program) if args.busy_beside else None
        if busy is not None:
            busy.start()
        try:
            for i in range(args.runs):
                runs.append(asyncio.run(one_run(base, ckpt, program, i, image)))
                print(json.dumps({"run": i, **runs[-1]}), file=sys.stderr, flush=True)
                if "error" in runs[-1] and not args.keep_going:
                    break
        finally:
            beside = busy.stop() if busy is not None else None
    ready = [r for r in runs if "error" not in r]
    medians = {k: round(statistics.median(float(r[k]) for r in ready), 3) for k in (ready[0] if ready else {})}
    summary = {"engine": args.engine, "launcher": args.launcher, "ready": len(ready), "failed": len(runs) - len(ready)}
    summary["busy_beside"] = beside
    print(json.dumps({**summary, "runs": runs, "median": medians}, indent=2))
    return 0 if len(ready) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
