"""The real :data:`~harness.service.starter.ServiceStarter`: one :class:`ServiceSupervisor` per start.

:class:`SupervisorStarter` turns a manager :class:`StartRequest` into a ready engine:

- the engine program comes from an :class:`EngineChoice`: ``sglang`` (the lock's installed python-env
  runtime) or ``fake`` (``python -m fixtures.fake_sglang``: launched, never imported); the launcher is
  ``process`` or ``oci`` (an ``oci`` engine runs the pinned image the choice names);
- ports: for the process launcher each attempt gets a port a bind test just accepted;
  when another server turns out to hold it (readiness saw a foreign listener and sent it nothing, or
  our engine died and the port is still taken) the attempt is a failed epoch and a new port is tried,
  as long as the lock's startup deadline allows;
- the request's ``on_failure``/``on_released`` are registered only once the epoch is ready, so a failed
  attempt never reaches the manager as a failure of the service it is still starting;
- when ``start`` fails and the supervisor could not confirm its engine gone, this raises
  ``inference_recovery_ambiguous`` (the manager then keeps the resources held).

The returned :class:`SupervisedService` is the manager's :class:`StartedService`; it also carries the
readiness report and the endpoint (keys stay in memory and in the 0600 key files).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from harness.contracts.lock import InferenceLockV1
from harness.contracts.service import EngineName, LauncherName, ProcessIdentityV1
from harness.engine import EngineProgram, ReadinessReport
from harness.engine.launch_spec import Launcher
from harness.errors import HitchError
from harness.launch.oci import OciLauncher, verify_container_route
from harness.launch.process import ProcessLauncher
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, require_installed
from harness.service.ports import choose_port, port_is_bindable
from harness.service.starter import StartedService, StartRequest
from harness.service.supervisor import ServiceEndpoint, ServiceSupervisor
from harness.store import model_files_dir

__all__ = ["FAKE_IMAGE_PYTHON", "EngineChoice", "SupervisedService", "SupervisorStarter", "engine_program", "stop_all"]

FAKE_IMAGE_PYTHON = "python3"  # the fake engine image's interpreter (fixtures.images.fake_engine)
_PORT_RETRY_CODES = ("inference_port_conflict", "inference_process_exited", "inference_lock_mismatch")


@dataclass(frozen=True)
class EngineChoice:
    """Which engine a lock's service runs and how (not part of the lock: ``fake`` is for contract runs)."""

    engine: EngineName = "sglang"
    launcher: LauncherName = "process"
    image: str | None = None  # oci: image ID or digest reference
    fake_flags: tuple[str, ...] = ()
    probe: bool = False  # prepare's probe start of a draft lock (harness/engine/probe.py); never a run's

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "engine": self.engine,
            "launcher": self.launcher,
            "image": self.image,
            "fake_flags": list(self.fake_flags),
        }
        if self.probe:
            out["probe"] = True
        return out


def engine_program(root: HitchRoot, lock: InferenceLockV1, choice: EngineChoice) -> EngineProgram:
    """The executable for ``choice``: the lock's installed runtime, or the fake engine."""
    if choice.engine == "fake":
        if choice.launcher == "oci":
            return EngineProgram("fake", (FAKE_IMAGE_PYTHON, "-m", "fixtures.fake_sglang", *choice.fake_flags))
        return EngineProgram.fake(choice.fake_flags)
    if choice.launcher == "oci":
        # The image carries its own interpreter; the catalog's OCI runtimes start the server module.
        return EngineProgram("sglang", ("python3", "-m", "sglang.launch_server"))
    return EngineProgram.from_runtime(require_installed(root, get_runtime(lock.runtime_id)))


@dataclass
class SupervisedService:
    """One ready epoch as the manager sees it (implements :class:`StartedService`)."""

    supervisor: ServiceSupervisor
    endpoint: ServiceEndpoint
    choice: EngineChoice
    attempts: int = 1
    ports_refused: list[int] = field(default_factory=list)
    force_stop_timeout_s: float = 2.0

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    @property
    def epoch(self) -> int:
        return self.endpoint.epoch

    @property
    def readiness(self) -> ReadinessReport:
        return self.endpoint.readiness

    async def verified_process(self) -> ProcessIdentityV1 | None:
        """The process identity of this epoch's service record, for the gateway's upstream check.

        An ``oci`` record is first confirmed against Docker (network, subnet, container, address, labels:
        ``inference_route_unavailable`` otherwise), so the gateway accepts a container address only for what
        hitch itself created for this epoch.
        """
        sup = self.supervisor
        record = sup.store.read()
        if record is None or record.epoch != self.endpoint.epoch or record.service_id != sup.service_id:
            raise HitchError("inference_route_unavailable", "no service record for this epoch", {"service_id": sup.service_id})
        process = record.process
        if process is not None and process.launcher == "oci":
            launcher = sup.launcher
            client = launcher.client() if isinstance(launcher, OciLauncher) else None
            host = urlsplit(self.endpoint.base_url).hostname or ""
            await asyncio.to_thread(
                verify_container_route, sup.root.path, sup.service_id, self.endpoint.epoch, process, host, client=client
            )
        return process

    async def stop(self, force: bool = False) -> dict[str, Any] | None:
        if force:
            self.supervisor.stop_timeout_s = min(self.supervisor.stop_timeout_s, self.force_stop_timeout_s)
        exit_info = await self.supervisor.stop()
        if self.supervisor.state != "stopped" and self.supervisor.last_exit is None:
            raise HitchError(
                "inference_recovery_ambiguous",
                "the engine stop was not confirmed",
                {"service_id": self.supervisor.service_id, "epoch": self.supervisor.epoch},
            )
        return {"exit_code": exit_info.exit_code, "reason": exit_info.reason} if exit_info else None


class SupervisorStarter:
    """A ``ServiceStarter`` for the manager: supervised engines, process or OCI, fake or SGLang."""

    def __init__(
        self,
        root: HitchRoot,
        choose: Callable[[InferenceLockV1], EngineChoice] | None = None,
        *,
        owner: str = "hitch-daemon",
        host: str = "127.0.0.1",
        port_picker: Callable[[set[int]], int] | None = None,
        monitor_interval_s: float = 2.0,
        startup_timeout_s: float | None = None,
        stop_timeout_s: float = 30.0,
        launchers: dict[str, Launcher] | None = None,
    ) -> None:
        self.root = root
        self.choose = choose or (lambda _lock: EngineChoice())
        self.owner = owner
        self.host = host
        self.port_picker = port_picker or (lambda avoid: choose_port(host, avoid))
        self.monitor_interval_s = monitor_interval_s
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._launchers: dict[str, Launcher] = dict(launchers or {})
        self.supervisors: dict[str, ServiceSupervisor] = {}

    def launcher(self, kind: LauncherName) -> Launcher:
        if kind not in self._launchers:
            made: Launcher = ProcessLauncher() if kind == "process" else OciLauncher(self.root.path)
            self._launchers[kind] = made
        return self._launchers[kind]

    async def __call__(self, req: StartRequest) -> StartedService:
        choice = self.choose(req.lock)
        program = engine_program(self.root, req.lock, choice)
        launcher = self.launcher(choice.launcher)
        deadline = self.startup_timeout_s if self.startup_timeout_s is not None else req.lock.execution.startup_timeout_ms / 1000
        sup = ServiceSupervisor(
            self.root,
            req.service_id,
            req.lock,
            model_files_dir(self.root, req.lock.model_id),
            program,
            launcher,
            owner=self.owner,
            isolation_key=req.isolation_key,
            host="0.0.0.0" if choice.launcher == "oci" else self.host,
            gpu_uuid=req.gpu_uuid,
            image=choice.image,
            monitor_interval_s=self.monitor_interval_s,
            stop_timeout_s=self.stop_timeout_s,
            stop_events=False,  # the manager records draining/stopped itself (with leases and exit details)
            probe=choice.probe,
        )
        self.supervisors[req.service_id] = sup
        end = time.monotonic() + deadline
        refused: list[int] = []
        attempts = 0
        while True:
            attempts += 1
            port = 30000 if choice.launcher == "oci" else self.port_picker(set(refused))
            sup.port = port
            sup.startup_timeout_s = max(0.5, end - time.monotonic())
            try:
                endpoint = await sup.start(req.run_id)
            except HitchError as err:
                self._raise_if_ambiguous(sup, err)
                if self._port_taken(choice, err, port) and time.monotonic() < end:
                    refused.append(port)
                    continue
                raise
            break
        sup.on_failure(req.on_failure)
        sup.on_released(req.on_released)
        return SupervisedService(sup, endpoint, choice, attempts, refused)

    def _port_taken(self, choice: EngineChoice, err: HitchError, port: int) -> bool:
        if choice.launcher != "process" or err.code not in _PORT_RETRY_CODES:
            return False
        if err.code == "inference_port_conflict":
            return True
        return not port_is_bindable(self.host, port)  # our engine is gone, yet the port is held

    @staticmethod
    def _raise_if_ambiguous(sup: ServiceSupervisor, err: HitchError) -> None:
        engine = sup.engine
        if engine is not None and sup.last_exit is None:
            raise HitchError(
                "inference_recovery_ambiguous",
                f"the start failed ({err.code}) and the engine could not be confirmed gone",
                {"service_id": sup.service_id, "epoch": sup.epoch, "cause": err.code},
            ) from err


async def stop_all(starter: SupervisorStarter) -> None:
    """Stop every supervisor this starter created (daemon shutdown after the manager closed). One still live
    here was not stopped through the manager, so it records its own draining/stopped events."""
    for sup in starter.supervisors.values():
        sup.stop_events = True
    await asyncio.gather(*(sup.stop() for sup in starter.supervisors.values()), return_exceptions=True)
