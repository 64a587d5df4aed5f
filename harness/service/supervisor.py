"""One inference service and its state machine (spec §9.1, DESIGN §4).

::

    absent → starting → ready → draining → stopped
                 │        │         │
                 └────────┴─────────┴──→ failed      (terminal for the epoch; start() again = new epoch)

A :class:`ServiceSupervisor` owns one ``service_id``: it compiles the lock into a launch (new keys every
epoch), starts the engine through any ``Launcher``, proves readiness, then watches it. Every transition is
written to ``state.json`` and appended to ``events.jsonl`` (``state_store.py``) as ``inference.*`` events with
service_id, inference_id, epoch, owner_id and timestamp; the events of a start name the run it is for
(``start(run_id)``), those of the monitor or a stop name none (the manager names a stop's run itself).

API for the manager/daemon (keep it small):

- ``await start()`` → :class:`ServiceEndpoint` (base URL, wire model, keys) once ready, or raises the
  HitchError of the failure (``inference_start_timeout``, ``inference_lock_mismatch``,
  ``inference_process_exited``, ``inference_oom``, ``inference_engine_unhealthy``); the engine is gone and
  the state is ``failed`` by then;
- ``await drain()`` (ready → draining: route nothing new), ``await stop()`` (→ stopped, engine confirmed gone);
- ``await fault(err, epoch)``: a failure found outside (the gateway's abort check) fails the epoch like the
  monitor would;
- ``on_failure(cb)``: ``cb(error)`` runs at once when the service fails (the gateway revokes its bindings
  there); ``on_released(cb)``: ``cb()`` runs after every confirmed stop, normal or not (the manager frees
  resources there). Callbacks may be sync or async; they must not await ``start``/``stop`` of this supervisor.

The monitor runs every ``monitor_interval_s`` (2 s) while ready or draining: process exit (OOM only when the
launcher confirms it), then ``/health``; ``health_failures`` failed checks in a row fail the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harness.contracts.events import LifecycleEventName, LifecycleEventV1
from harness.contracts.lock import InferenceLockV1
from harness.contracts.service import DeviceAllocationV1, InferenceServiceRecordV1, ServiceState
from harness.engine import EngineKeys, EngineLaunch, EngineProgram, KeyFiles, ReadinessReport, prepare_launch, wait_ready
from harness.engine.launch_spec import ExitInfo, LaunchedEngine, Launcher
from harness.engine.readiness import ListenerCheck
from harness.errors import HitchError
from harness.net import free_port
from harness.paths import HitchRoot, atomic_write_json
from harness.service.isolation import isolation_key as isolation_key_for
from harness.service.ports import listener_state, process_tree
from harness.service.state_store import ServiceStateStore

__all__ = ["FailureCallback", "ReleaseCallback", "ServiceEndpoint", "ServiceSupervisor", "free_port"]

FailureCallback = Callable[[HitchError], Awaitable[None] | None]
ReleaseCallback = Callable[[], Awaitable[None] | None]

_log = logging.getLogger(__name__)
_LIVE: tuple[ServiceState, ...] = ("starting", "ready", "draining")
_TERMINAL: tuple[ServiceState, ...] = ("absent", "stopped", "failed")


@dataclass(frozen=True)
class ServiceEndpoint:
    """Where a ready service answers and how to authenticate to it (for the gateway; never persisted)."""

    service_id: str
    inference_id: str
    epoch: int
    base_url: str
    wire_model: str
    keys: EngineKeys = field(repr=False)
    key_files: KeyFiles
    readiness: ReadinessReport
    ready_s: float | None = None  # from the engine's launch until readiness passed (this epoch's cold start)
    started_for: str | None = None  # the run whose acquire began this epoch's start, when one did


class ServiceSupervisor:
    """Starts, watches and stops one engine service; see the module docstring for the contract."""

    def __init__(
        self,
        root: HitchRoot,
        service_id: str,
        lock: InferenceLockV1,
        model_dir: Path,
        program: EngineProgram,
        launcher: Launcher,
        *,
        owner: str,
        isolation_key: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        gpu_uuid: str | None = None,
        image: str | None = None,
        monitor_interval_s: float = 2.0,
        startup_timeout_s: float | None = None,
        stop_timeout_s: float = 30.0,
        health_timeout_s: float = 20.0,
        health_failures: int = 3,
        stop_events: bool = True,
        probe: bool = False,
    ) -> None:
        self.root = root
        self.service_id = service_id
        self.stop_events = stop_events  # False under the manager, which logs draining/stopped itself
        self.lock = lock
        self.model_dir = model_dir
        self.program = program
        self.launcher = launcher
        self.owner = owner
        self.isolation_key = isolation_key or isolation_key_for(lock.inference_id, owner)
        self.host = host
        self.port = port
        self.gpu_uuid = gpu_uuid
        self.image = image
        self.probe = probe  # prepare's probe start: SGLang sizes the pool and prefill (engine/probe.py)
        self.monitor_interval_s = monitor_interval_s
        self.startup_timeout_s = startup_timeout_s if startup_timeout_s is not None else lock.execution.startup_timeout_ms / 1000
        self.stop_timeout_s = stop_timeout_s
        self.health_timeout_s = health_timeout_s
        self.health_failures = health_failures
        self.store = ServiceStateStore(root, service_id)
        self._mutex = asyncio.Lock()
        self._failure_cbs: list[FailureCallback] = []
        self._release_cbs: list[ReleaseCallback] = []
        self._state: ServiceState = "absent"
        self._epoch = 0
        self._created_at = time.time()
        self._record: InferenceServiceRecordV1 | None = None
        self._engine: LaunchedEngine | None = None
        self._cpu_cores: tuple[int, ...] = ()  # the cores the current epoch's engine is pinned to (cpu)
        self._endpoint: ServiceEndpoint | None = None
        self._monitor: asyncio.Task[None] | None = None
        self.failure: HitchError | None = None
        self.last_exit: ExitInfo | None = None
        self.log_path: Path | None = None  # the engine's log of the current epoch (set once its launch is compiled)
        self.started_at: float | None = None  # when the current epoch's start began (wall clock)
        self._cause: str | None = None  # the run a start in progress is for: its events name it (spec §12.1)

    # -- public state -------------------------------------------------------------------------------

    @property
    def state(self) -> ServiceState:
        return self._state

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def endpoint(self) -> ServiceEndpoint | None:
        """The ready (or draining) service's endpoint; ``None`` in any other state."""
        return self._endpoint if self._state in ("ready", "draining") else None

    @property
    def engine(self) -> LaunchedEngine | None:
        return self._engine

    def on_failure(self, callback: FailureCallback) -> None:
        self._failure_cbs.append(callback)

    def on_released(self, callback: ReleaseCallback) -> None:
        self._release_cbs.append(callback)

    # -- persistence --------------------------------------------------------------------------------

    def _write(self, state: ServiceState, **changes: Any) -> None:
        self._state = state
        now = time.time()
        base = self._record
        fields: dict[str, Any] = {
            "service_id": self.service_id,
            "inference_id": self.lock.inference_id,
            "isolation_key": self.isolation_key,
            "state": state,
            "epoch": self._epoch,
            "owner": self.owner,
            "process": base.process if base is not None else None,
            "allocation": DeviceAllocationV1(
                device=self.lock.execution.platform.backend, gpu_uuid=self.gpu_uuid, cpu_cores=list(self._cpu_cores)
            ),
            "endpoint_ref": base.endpoint_ref if base is not None else None,
            "created_at": self._created_at,
            "updated_at": now,
            "error_code": base.error_code if base is not None else None,
            "error_message": base.error_message if base is not None else None,
        }
        fields.update(changes)
        self._record = InferenceServiceRecordV1.model_validate(fields)
        self.store.write(self._record)

    def _event(self, name: LifecycleEventName, **details: Any) -> None:
        self.store.append_event(
            LifecycleEventV1(
                event=name,
                service_id=self.service_id,
                inference_id=self.lock.inference_id,
                epoch=self._epoch,
                owner_id=self.owner,
                timestamp=time.time(),
                run_id=self._cause,
                details=details,
            )
        )

    def _stop_event(self, name: LifecycleEventName, **details: Any) -> None:
        if self.stop_events:
            self._event(name, **details)

    def _log_header(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            os.write(fd, f"==== hitch: {self.service_id} epoch {self._epoch} starting at {stamp} ====\n".encode())
        finally:
            os.close(fd)

    # -- start --------------------------------------------------------------------------------------

    async def start(self, run_id: str | None = None) -> ServiceEndpoint:
        """Start a new epoch and return once it is ready; on failure the engine is gone and this raises. ``run_id``:
        the run this start is for; its starting/ready events (or the failure of the start) name it."""
        async with self._mutex:
            self._cause = run_id
            try:
                return await self._start_locked(run_id)
            finally:
                self._cause = None

    async def _start_locked(self, run_id: str | None) -> ServiceEndpoint:
        if self._state in _LIVE:
            raise HitchError("inference_in_use", f"service {self.service_id} is already {self._state}", {})
        stored = self.store.read()
        if self._state == "absent" and stored is not None and stored.state in _LIVE:
            raise HitchError(
                "inference_recovery_ambiguous",
                f"service {self.service_id} was left {stored.state} by an earlier daemon; run recovery first",
                {"service_id": self.service_id, "epoch": stored.epoch, "state": stored.state},
            )
        self._epoch = max(self._epoch, stored.epoch if stored is not None else 0) + 1
        self._created_at = time.time()
        self.started_at = self._created_at
        self._record = None
        self._engine = None
        self._endpoint = None
        self.failure = None
        self.last_exit = None
        port = self.port if self.port is not None else free_port(self.host)
        self._write("starting")
        self._event("inference.starting", port=port, engine=self.program.kind, launcher=self.launcher.kind)
        t0 = time.monotonic()
        try:
            launch = self._prepare(port)
            self.log_path = launch.spec.log_path
            self._log_header(launch.spec.log_path)
            self._cpu_cores = launch.spec.cpu_cores
            self._engine = await self.launcher.start(launch.spec)
            self._write("starting", process=self._engine.identity)
            report = await wait_ready(
                self._engine,
                launch.keys,
                launch.wire_model,
                launch.expected,
                self.startup_timeout_s,
                listener=self._listener_check(self._engine, port),
            )
        except HitchError as err:
            await self._fail_locked(err)
            raise
        except asyncio.CancelledError:
            # The caller gave up (daemon shutdown): never leave a half-started engine behind.
            cancelled = HitchError("inference_start_timeout", "the start was cancelled", {"cancelled": True})
            await asyncio.shield(self._fail_locked(cancelled))
            raise
        except Exception as exc:
            internal = HitchError("internal_error", f"starting the engine failed: {type(exc).__name__}", {})
            await self._fail_locked(internal)
            raise internal from exc
        ready_s = time.monotonic() - t0
        self._endpoint = ServiceEndpoint(
            service_id=self.service_id,
            inference_id=self.lock.inference_id,
            epoch=self._epoch,
            base_url=self._engine.base_url,
            wire_model=launch.wire_model,
            keys=launch.keys,
            key_files=launch.key_files,
            readiness=report,
            ready_s=round(ready_s, 3),
            started_for=run_id,
        )
        ref = self._write_endpoint_ref(self._endpoint)
        self._write("ready", endpoint_ref=str(ref))
        self._event(
            "inference.ready",
            ready_s=round(ready_s, 3),
            engine_health_s=round(report.health_s or 0.0, 3),
            engine_idle_wait_s=report.idle_wait_s,
            engine_busy_polls=report.busy_polls,
            flush_attempts=report.flush_attempts,
            engine_version=report.engine_version,
            max_total_num_tokens=report.max_total_num_tokens,
            base_url=self._endpoint.base_url,
            wire_model=launch.wire_model,
        )
        self._monitor = asyncio.ensure_future(self._watch(self._engine, self._epoch))
        return self._endpoint

    def _listener_check(self, engine: LaunchedEngine, port: int) -> ListenerCheck | None:
        """For a host process: who listens on its port, so an unknown server is never sent a request."""
        pid = engine.identity.pid
        if self.launcher.kind != "process" or pid is None:
            return None  # a container has its own network namespace: nobody else can hold its port

        async def check() -> str:
            return await asyncio.to_thread(listener_state, self.host, port, process_tree(pid))

        return check

    def _prepare(self, port: int) -> EngineLaunch:
        return prepare_launch(
            self.root,
            self.lock,
            self.model_dir,
            self.program,
            service_id=self.service_id,
            epoch=self._epoch,
            port=port,
            host=self.host,
            launcher=self.launcher.kind,
            gpu_uuid=self.gpu_uuid,
            image=self.image,
            probe=self.probe,
        )

    def _write_endpoint_ref(self, endpoint: ServiceEndpoint) -> Path:
        path = self.root.private_dir(self.service_id) / "endpoint.json"
        atomic_write_json(
            path,
            {
                "service_id": endpoint.service_id,
                "epoch": endpoint.epoch,
                "base_url": endpoint.base_url,
                "wire_model": endpoint.wire_model,
                "api_key_file": str(endpoint.key_files.api_key),
            },
            mode=0o600,
        )
        return path

    # -- stop / drain -------------------------------------------------------------------------------

    async def drain(self) -> None:
        """ready → draining: the service takes no new routes; in-flight requests finish."""
        async with self._mutex:
            if self._state == "ready":
                self._write("draining")
                self._stop_event("inference.draining")

    async def stop(self) -> ExitInfo | None:
        """Stop the engine (draining first) and return once it is confirmed gone; no-op when not live."""
        if self._state in _TERMINAL:
            return self.last_exit
        released = False
        async with self._mutex:
            if self._state in _TERMINAL:
                return self.last_exit
            if self._state == "ready":
                self._write("draining")
                self._stop_event("inference.draining")
            await self._cancel_monitor()
            engine = self._engine
            try:
                exit_info = await engine.stop(self.stop_timeout_s) if engine is not None else None
            except HitchError as err:
                await self._fail_locked(err, stop_engine=False)
                raise
            self.last_exit = exit_info
            self._write("stopped")
            details: dict[str, Any] = {}
            if exit_info is not None:
                details = {"exit_code": exit_info.exit_code, "reason": exit_info.reason}
                details |= {"escalated": exit_info.escalated, "grace_s": self.stop_timeout_s}
            self._stop_event("inference.stopped", **details)
            released = True
        if released:
            await self._run_callbacks(self._release_cbs)
        return self.last_exit

    async def fault(self, err: HitchError, epoch: int) -> bool:
        """Fault handling reported from outside (the gateway saw the engine keep a slot it was told to free):
        ``epoch`` fails as a monitor failure would (``on_failure`` at once, the engine stopped, then
        ``on_released``). False when that epoch is not the live one any more."""
        async with self._mutex:
            if self._epoch != epoch or self._state not in ("ready", "draining"):
                return False
            await self._cancel_monitor()
            await self._fail_locked(err)
            return True

    # -- failure ------------------------------------------------------------------------------------

    async def _fail_locked(self, err: HitchError, exit_info: ExitInfo | None = None, stop_engine: bool = True) -> None:
        """Caller holds ``self._mutex``. Mark failed, tell on_failure at once, stop, then tell on_released."""
        self.failure = err
        self._endpoint = None
        exit_code = exit_info.exit_code if exit_info is not None else err.details.get("exit_code")
        self._write("failed", error_code=err.code, error_message=err.message)
        self._event("inference.failed", code=err.code, message=err.message, exit_code=exit_code)
        await self._run_callbacks(self._failure_cbs, err)
        if not stop_engine or self._engine is None:
            return
        try:
            self.last_exit = await self._engine.stop(self.stop_timeout_s)
        except HitchError as stop_err:  # not confirmed gone: resources stay held
            _log.error("service %s: stop after failure not confirmed: %s", self.service_id, stop_err.code)
            return
        await self._run_callbacks(self._release_cbs)

    async def _run_callbacks(self, callbacks: list[Any], *args: Any) -> None:
        for cb in list(callbacks):
            try:
                result = cb(*args)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                _log.exception("service %s: a lifecycle callback failed", self.service_id)

    async def _cancel_monitor(self) -> None:
        task, self._monitor = self._monitor, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- monitor ------------------------------------------------------------------------------------

    async def _watch(self, engine: LaunchedEngine, epoch: int) -> None:
        failures = 0
        async with httpx.AsyncClient(base_url=engine.base_url, trust_env=False) as client:
            while True:
                await asyncio.sleep(self.monitor_interval_s)
                exit_info = await engine.poll()
                if exit_info is not None:
                    await self._monitor_failed(epoch, _exit_error(exit_info), exit_info)
                    return
                if await _healthy(client, self.health_timeout_s):
                    failures = 0
                    continue
                failures += 1
                if failures >= self.health_failures:
                    err = HitchError(
                        "inference_engine_unhealthy",
                        f"/health failed {failures} times in a row",
                        {"checks": failures, "service_id": self.service_id},
                    )
                    await self._monitor_failed(epoch, err, None)
                    return

    async def _monitor_failed(self, epoch: int, err: HitchError, exit_info: ExitInfo | None) -> None:
        async with self._mutex:
            if self._epoch != epoch or self._state not in ("ready", "draining"):
                return  # a stop or a new epoch got here first
            self._monitor = None
            await self._fail_locked(err, exit_info)


def _exit_error(exit_info: ExitInfo) -> HitchError:
    if exit_info.oom:
        return HitchError(
            "inference_oom", f"the engine was killed for memory ({exit_info.reason})", {"exit_code": exit_info.exit_code}
        )
    return HitchError(
        "inference_process_exited",
        f"the engine exited ({exit_info.reason})",
        {"exit_code": exit_info.exit_code},
    )


async def _healthy(client: httpx.AsyncClient, timeout_s: float) -> bool:
    try:
        resp = await client.get("/health", timeout=httpx.Timeout(timeout_s, connect=min(2.0, timeout_s)))
    except httpx.HTTPError:
        return False
    return resp.status_code == 200
