"""The contract between the engine adapter and every launcher, so the supervisor never knows which one it drives.

A launcher turns a :class:`LaunchSpec` (what the engine adapter compiled from a lock) into a
running :class:`LaunchedEngine`. Identity is recorded so recovery can prove ownership later
(PID + start time for processes; labels + container id for containers). ``poll`` and ``stop``
report an :class:`ExitInfo`; an OOM is reported only when it is confirmed (container
``OOMKilled``), every other death is a plain exit with its code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from harness.contracts.lock import ResourceVectorV1
from harness.contracts.service import ProcessIdentityV1

__all__ = ["ExitInfo", "LaunchSpec", "LaunchedEngine", "Launcher", "OWNER_LABEL_PREFIX"]

OWNER_LABEL_PREFIX = "dev.hitch"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one engine epoch. ``env`` is already an allow-list (spec §11.2):
    the launcher adds nothing from its own environment. ``argv[0]`` is the executable; no shell.

    ``secret_files`` maps a path inside the engine's view to a host file (0600) for launchers that
    must mount them; secrets never appear in ``argv``.
    """

    service_id: str
    epoch: int
    inference_id: str
    argv: list[str]
    env: dict[str, str]
    host: str
    port: int
    model_dir: Path
    log_path: Path
    device: Literal["cpu", "cuda"]
    resources: ResourceVectorV1
    labels: dict[str, str] = field(default_factory=dict)
    gpu_uuid: str | None = None
    image: str | None = None  # oci only: image reference by digest or image ID
    secret_files: dict[str, Path] = field(default_factory=dict)
    cpu_cores: tuple[int, ...] = ()  # cpu: the cores the engine's threads are pinned to (one NUMA node)


@dataclass(frozen=True)
class ExitInfo:
    exit_code: int | None
    oom: bool
    reason: str
    # a stop whose grace ran out: the engine was killed, not drained. A bounded stop promises the engine is
    # gone, not that it exits cleanly in time (a loaded machine can keep SGLang's shutdown past any grace);
    # the escalation is recorded as evidence, never hidden and never a failure of the stop.
    escalated: bool = False


class LaunchedEngine(Protocol):
    identity: ProcessIdentityV1

    @property
    def base_url(self) -> str:
        """Where the engine answers (host side), e.g. ``http://127.0.0.1:31234``."""
        ...

    async def poll(self) -> ExitInfo | None:
        """None while the engine is alive; its exit once it is gone."""
        ...

    async def stop(self, timeout_s: float) -> ExitInfo:
        """SIGTERM (graceful drain), then SIGKILL after ``timeout_s``; returns once the stop is confirmed."""
        ...


class Launcher(Protocol):
    @property
    def kind(self) -> Literal["process", "oci"]:
        """Which launcher this is (read-only, so each launcher may narrow it to its own literal)."""
        ...

    async def start(self, spec: LaunchSpec) -> LaunchedEngine: ...
