"""The SGLang engine adapter's front door: one lock + one epoch → a :class:`LaunchSpec` and what to verify.

:func:`prepare_launch` issues the epoch's keys (``keys.py``), compiles the flags (``argv.py``) and the
environment allow-list (``environment.py``), and returns an :class:`EngineLaunch`: the spec a launcher
starts, the keys, the wire model name and the ``/server_info`` values readiness must see (``verify.py``).
The launcher kind only changes where the secrets YAML is seen by the engine (host path for a process,
a mounted path inside a container).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.contracts.lock import CpuPlatformV1, InferenceLockV1
from harness.devices.cores import pick_cores
from harness.devices.cpu import read_memory, read_numa_nodes
from harness.engine.argv import EngineProgram, engine_flags, wire_model_name
from harness.engine.environment import engine_environment
from harness.engine.keys import EngineKeys, KeyFiles, issue_keys
from harness.engine.launch_spec import OWNER_LABEL_PREFIX, LaunchSpec
from harness.engine.memory_budget import start_fraction
from harness.engine.verify import expected_server_info
from harness.paths import HitchRoot

__all__ = ["CONTAINER_SECRETS_DIR", "ENGINE_LOG", "EngineLaunch", "owner_labels", "prepare_launch"]

ENGINE_LOG = "engine.log"
CONTAINER_SECRETS_DIR = "/run/hitch"


@dataclass(frozen=True)
class EngineLaunch:
    """One compiled epoch: start ``spec``, then check the engine against ``expected``."""

    spec: LaunchSpec
    keys: EngineKeys = field(repr=False)
    key_files: KeyFiles
    wire_model: str
    expected: dict[str, Any]
    program: EngineProgram


def owner_labels(root: HitchRoot, service_id: str, epoch: int, inference_id: str) -> dict[str, str]:
    """Ownership labels recovery uses to prove a container is ours (root, service, epoch, inference)."""
    return {
        f"{OWNER_LABEL_PREFIX}.root": str(root.path),
        f"{OWNER_LABEL_PREFIX}.service": service_id,
        f"{OWNER_LABEL_PREFIX}.epoch": str(epoch),
        f"{OWNER_LABEL_PREFIX}.inference_id": inference_id,
    }


def _cores(lock: InferenceLockV1) -> tuple[int, ...]:
    """A CPU lock's engine runs on exactly ``cpu_threads`` cores of one NUMA node; a CUDA one is not pinned."""
    platform = lock.execution.platform
    if not isinstance(platform, CpuPlatformV1):
        return ()
    return tuple(pick_cores(platform.cpu_threads))


def prepare_launch(
    root: HitchRoot,
    lock: InferenceLockV1,
    model_dir: Path,
    program: EngineProgram,
    *,
    service_id: str,
    epoch: int,
    port: int,
    host: str = "127.0.0.1",
    launcher: Literal["process", "oci"] = "process",
    gpu_uuid: str | None = None,
    image: str | None = None,
    probe: bool = False,
) -> EngineLaunch:
    """Fresh keys for ``epoch`` and the exact launch of ``lock`` on ``host:port`` (``probe``: prepare's probe
    start, where SGLang chooses the pool and prefill sizes; see ``probe.py``)."""
    keys, files = issue_keys(root, service_id)
    # A process sees the host file; a container sees it where the OCI launcher mounts ``secret_files``.
    config_seen = str(files.config) if launcher == "process" else f"{CONTAINER_SECRETS_DIR}/{files.config.name}"
    # a sealed CPU start holds its sealed pool whatever the neighbours hold (memory_budget.py); the probe measures
    # (the fake engine sizes nothing from memory: it gets the lock's value as it is)
    sized = not probe and program.kind == "sglang" and lock.execution.platform.backend == "cpu"
    fraction = _cpu_fraction(lock, model_dir, launcher) if sized else None
    flags = engine_flags(lock, model_dir, host, port, config_seen, probe=probe, mem_fraction=fraction)
    env = engine_environment(lock, program.runtime_env, root.private_dir(service_id) / "home", gpu_uuid)
    spec = LaunchSpec(
        service_id=service_id,
        epoch=epoch,
        inference_id=lock.inference_id,
        argv=[*program.argv, *flags],
        env=env,
        host=host,
        port=port,
        model_dir=model_dir,
        log_path=root.service_dir(service_id) / ENGINE_LOG,
        device=lock.execution.platform.backend,  # type: ignore[arg-type]  # metal is refused by engine_flags
        resources=lock.resources,
        labels=owner_labels(root, service_id, epoch, lock.inference_id),
        gpu_uuid=gpu_uuid,
        image=image,
        secret_files={config_seen: files.config},
        cpu_cores=_cores(lock),
    )
    return EngineLaunch(
        spec=spec,
        keys=keys,
        key_files=files,
        wire_model=wire_model_name(lock.model_id),
        expected=expected_server_info(lock, model_dir, port, host=host, probe=probe, mem_fraction=fraction),
        program=program,
    )


def _cpu_fraction(lock: InferenceLockV1, model_dir: Path, launcher: str) -> float:
    """This start's memory budget (:func:`~harness.engine.memory_budget.start_fraction`) from the memory free now;
    in a container, SGLang sees its cgroup's limit (the lock's ``memory_bytes``) as the most there is."""
    _, available = read_memory(Path("/"))
    nodes = max(1, len(read_numa_nodes(Path("/"))))
    if launcher == "oci":
        available, nodes = min(available, lock.resources.memory_bytes), 1
    return start_fraction(lock, model_dir, available, nodes)
