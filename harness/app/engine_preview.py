"""The engine command line a lock compiles to, shown without starting anything (``hitch local argv``).

:func:`engine_preview` compiles a lock for its runtime as a service start would (keys and the engine's home in a
throwaway folder, shown as ``<private>``; the port SGLang's default, a service chooses its own) and, asked to,
has SGLang's own parser and resolution read it in an installed runtime of the same SGLang
(:mod:`harness.engine.argv_check`): every flag known, every value echoed as the lock means.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from harness.contracts.lock import InferenceLockV1
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.devices import probe_cuda
from harness.engine import EngineLaunch, EngineProgram, prepare_launch
from harness.engine.argv_check import case_from_launch, parser_runtime, read_with_sglang, require_accepted
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, planned_runtime
from harness.store import model_files_dir, read_manifest

__all__ = ["PREVIEW_PORT", "engine_preview"]

PREVIEW_PORT = 30000  # SGLang's default; a service's port is chosen when it starts


def _hide(value: Any, private: str) -> Any:
    """The temporary private folder of the preview shown as ``<private>`` (a service has its own)."""
    return value.replace(private, "<private>") if isinstance(value, str) else value


def _check_argv(launch: EngineLaunch, runtime: InferenceRuntimeManifestV1, parser_root: HitchRoot) -> dict[str, Any]:
    reader = parser_runtime(parser_root, runtime)
    if reader is None:
        raise HitchError(
            "inference_runtime_unavailable",
            f"no runtime with SGLang {runtime.engine_version} is installed under {parser_root.path} to read the command"
            " line: install one (`hitch runtime install`) or pass --parser-root",
            {"engine_version": runtime.engine_version, "root": str(parser_root.path)},
        )
    case = case_from_launch("argv", launch)
    report = read_with_sglang(reader, [case])
    require_accepted(report, [case])
    return {"sglang": report.versions.get("sglang"), "runtime": reader.manifest.name, "fields": len(case.expected)}


def engine_preview(
    root: HitchRoot, lock: InferenceLockV1, *, probe: bool, gpu: str | None, parser_root: HitchRoot | None
) -> dict[str, Any]:
    """The ``engine-argv`` payload: argv, environment and the ``/server_info`` fields readiness expects; with
    ``parser_root`` (a root holding a runtime of the same SGLang), what SGLang's parser made of it."""
    read_manifest(root, lock.model_id)  # the model must be in this root's store
    runtime = get_runtime(lock.runtime_id)
    program = EngineProgram.from_runtime(planned_runtime(root, runtime))
    uuid = None
    if lock.execution.platform.backend == "cuda":
        gpus = probe_cuda().gpus
        uuid = gpu or (gpus[0].uuid if gpus else "<the leased GPU's UUID>")
    with tempfile.TemporaryDirectory(prefix="hitch-argv-") as tmp:
        launch = prepare_launch(
            HitchRoot(Path(tmp)),  # the epoch's keys and home are written here, then dropped
            lock,
            model_files_dir(root, lock.model_id),
            program,
            service_id="argv",
            epoch=1,
            port=PREVIEW_PORT,
            gpu_uuid=uuid,
            probe=probe,
        )
        checked = _check_argv(launch, runtime, parser_root) if parser_root is not None else None
        private = str(Path(tmp) / "inference" / "private" / "argv")
        shown = [_hide(a, private) for a in launch.spec.argv]
        env = {k: _hide(v, private) for k, v in launch.spec.env.items()}
        expected = {k: _hide(v, private) for k, v in launch.expected.items()}
    return {
        "kind": "engine-argv",
        "inference_id": lock.inference_id,
        "runtime": runtime.name,
        "probe": probe,
        "argv": shown,
        "env": env,
        "expected_server_info": expected,
        "checked": checked,
    }
