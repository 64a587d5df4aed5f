"""Shared inputs for engine, launcher and supervisor tests: a HITCH_ROOT holding the tiny checkpoint and its lock."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fixtures.checkpoint import tiny_checkpoint_cached
from harness.contracts.lock import InferenceLockV1
from harness.engine import EngineProgram
from harness.engine.launch_spec import Launcher
from harness.launch.process import ProcessLauncher
from harness.lock import build_lock
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.service import ServiceSupervisor
from harness.store import import_model, model_files_dir

GENERIC_RUNTIME = "sglang-0.5.23-cpu-generic"


@dataclass(frozen=True)
class ServiceInputs:
    root: HitchRoot
    lock: InferenceLockV1
    model_dir: Path

    def supervisor(
        self, program: EngineProgram, launcher: Launcher | None = None, service_id: str = "svc-test", **options: float
    ) -> ServiceSupervisor:
        """A supervisor of this lock's service (owner ``test-owner``, process launcher unless given);
        ``options``: its intervals and timeouts."""
        launcher = launcher or ProcessLauncher()
        return ServiceSupervisor(
            self.root,
            service_id,
            self.lock,
            self.model_dir,
            program,
            launcher,
            owner="test-owner",
            **options,  # type: ignore[arg-type]
        )


def service_inputs(root_dir: Path, checkpoint_cache: Path, profile: str = "baseline") -> ServiceInputs:
    """Import ``fixture:tiny`` into a fresh root and draft its CPU lock for the generic-CPU runtime."""
    root = HitchRoot(root_dir)
    result = import_model(root, tiny_checkpoint_cached(checkpoint_cache), "tiny")
    lock = build_lock(
        result.manifest,
        get_runtime(GENERIC_RUNTIME),
        device="cpu",
        profile="baseline" if profile == "baseline" else "throughput",
        cpu_cores_per_node=2,
        context_tokens=2048,
    )
    return ServiceInputs(root, lock, model_files_dir(root, lock.model_id))


def checkpoint_cache(base: Path) -> Path:
    """One checkpoint build per test session, shared by xdist workers."""
    return base.parent / "tiny-ckpt-engine"
