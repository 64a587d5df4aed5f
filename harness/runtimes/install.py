"""Installing runtimes into HITCH_ROOT and finding installed ones.

A python-env runtime becomes ``HitchRoot.runtime_envs/<runtime hex>/``::

    venv/               python -m venv + pip install --require-hashes --no-deps -r files/<requirements>
    files/<rel path>    copies of the requirements file and of every shipped file (the sgl_kernel shim)
    installed.json      marker: runtime_id, file digests, versions; written last

The shim is *copied* into the runtime folder (not installed into site-packages, not run
from the catalog checkout): the installed runtime then does not depend on the working
tree, its bytes are checked against the sha256 recorded in the manifest (which the
runtime_id covers) before every launch, and importing it never writes ``__pycache__``
into the catalog. It reaches the engine only through ``PYTHONPATH`` of this runtime.

Everything is built in a staging folder beside the final one and published by one
``os.replace``; a crash leaves only a ``.staging-*`` folder that the next install removes.
The manifest is recorded under ``store/inference-runtimes/sha256/<hex>/manifest.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from filelock import FileLock

from harness.contracts.runtime import InferenceRuntimeManifestV1, PythonEnvPackage
from harness.errors import HitchError
from harness.ids import sha256_hex
from harness.paths import HitchRoot, atomic_write_json
from harness.runtimes.catalog import require_certifiable_pin, runtime_source_dir
from harness.runtimes.oci_pull import check_pulled_image, pull_image, record_pull
from harness.runtimes.pins import inspect_image
from harness.runtimes.venv_build import clean_leftovers, dir_bytes, install_requirements, publish, retarget_scripts

__all__ = [
    "SERVER_MODULE",
    "InstallResult",
    "InstalledRuntime",
    "install_runtime",
    "installed_runtime",
    "planned_runtime",
    "record_manifest",
    "require_installed",
    "runtime_dir",
]

SERVER_MODULE = "sglang.srt.entrypoints.http_server"
MARKER = "installed.json"
_VERIFY = (
    "import json, sys, sgl_kernel, torch, sglang, {module}\n"
    "json.dump({{'sglang': sglang.__version__, 'torch': torch.__version__, "
    "'shim': bool(getattr(sgl_kernel, 'SHIM', False)), 'python': sys.version.split()[0]}}, sys.stdout)\n"
)


@dataclass(frozen=True)
class InstalledRuntime:
    """What the engine adapter needs to launch ``python -m sglang.launch_server`` of this runtime."""

    manifest: InferenceRuntimeManifestV1
    path: Path
    python: Path
    env: dict[str, str] = field(default_factory=dict)

    def launch_argv(self) -> list[str]:
        return [str(self.python), "-m", "sglang.launch_server"]

    def launch_environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the runtime's variables on top."""
        merged = dict(os.environ if base is None else base)
        merged.pop("PYTHONHOME", None)
        merged.update(self.env)
        return merged


@dataclass(frozen=True)
class InstallResult:
    runtime: InstalledRuntime | None  # None for an oci runtime (the image lives in Docker)
    already_installed: bool
    seconds: float
    venv_bytes: int | None
    versions: dict[str, Any]
    image_bytes: int | None = None  # an oci runtime's pulled image, as ``docker image inspect`` sizes it


def runtime_dir(root: HitchRoot, manifest: InferenceRuntimeManifestV1) -> Path:
    return root.digest_dir(root.runtime_envs, manifest.runtime_id)


def _shipped(pkg: PythonEnvPackage) -> list[tuple[str, str]]:
    return [(pkg.lock_file.path, pkg.lock_file.sha256), *((f.path, f.sha256) for f in pkg.files)]


def _runtime_env(manifest: InferenceRuntimeManifestV1, folder: Path, pkg: PythonEnvPackage) -> dict[str, str]:
    env = dict(manifest.launch_env)
    env["PYTHONNOUSERSITE"] = "1"
    if pkg.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(folder / "files" / p) for p in pkg.pythonpath)
    return env


def _check_files(base: Path, pkg: PythonEnvPackage, code: str, name: str) -> None:
    for rel, sha in _shipped(pkg):
        path = base / rel
        actual = "sha256:" + sha256_hex(path.read_bytes()) if path.is_file() else None
        if actual != sha:
            raise HitchError(
                code,
                f"runtime {name}: {rel} does not match the manifest's sha256",
                {"path": str(path), "expected": sha, "actual": actual},
            )


def planned_runtime(root: HitchRoot, manifest: InferenceRuntimeManifestV1) -> InstalledRuntime:
    """Where and how a python-env runtime runs once installed under ``root`` (nothing is checked: a preview)."""
    if not isinstance(manifest.package, PythonEnvPackage):
        raise HitchError("usage_error", f"runtime {manifest.name} is an OCI image, not a python-env", {})
    folder = runtime_dir(root, manifest)
    python = folder / "venv" / "bin" / "python"
    return InstalledRuntime(manifest, folder, python, _runtime_env(manifest, folder, manifest.package))


def installed_runtime(root: HitchRoot, manifest: InferenceRuntimeManifestV1) -> InstalledRuntime | None:
    """The installed python-env runtime, verified; ``None`` when absent (or an oci runtime).

    A present but altered install (marker for another id, shipped files changed, no python)
    raises ``inference_runtime_integrity_failed``: no other bytes are ever launched.
    """
    if not isinstance(manifest.package, PythonEnvPackage):
        return None
    folder = runtime_dir(root, manifest)
    marker = folder / MARKER
    if not marker.is_file():
        return None
    fail = "inference_runtime_integrity_failed"
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError) as exc:
        raise HitchError(fail, f"runtime {manifest.name}: unreadable install marker", {"path": str(marker)}) from exc
    if data.get("runtime_id") != manifest.runtime_id:
        raise HitchError(fail, f"runtime {manifest.name}: install marker names another runtime", {"path": str(marker)})
    python = folder / "venv" / "bin" / "python"
    if not python.exists():
        raise HitchError(fail, f"runtime {manifest.name}: the venv has no python", {"path": str(python)})
    _check_files(folder / "files", manifest.package, fail, manifest.name)
    return planned_runtime(root, manifest)


def _unavailable(manifest: InferenceRuntimeManifestV1, message: str, **details: Any) -> HitchError:
    return HitchError("inference_runtime_unavailable", message, {"runtime": manifest.name, **details})


def require_installed(root: HitchRoot, manifest: InferenceRuntimeManifestV1) -> InstalledRuntime:
    found = installed_runtime(root, manifest)
    if found is None:
        raise _unavailable(
            manifest, f"runtime {manifest.name} is not installed under {root.path}", runtime_id=manifest.runtime_id
        )
    return found


def record_manifest(root: HitchRoot, manifest: InferenceRuntimeManifestV1) -> Path:
    path = root.digest_dir(root.runtimes, manifest.runtime_id) / "manifest.json"
    atomic_write_json(path, manifest.to_json_dict())
    return path


def _base_python(manifest: InferenceRuntimeManifestV1, pkg: PythonEnvPackage) -> str:
    """The interpreter the requirements were resolved for: this one if it matches, else ``pythonX.Y`` on PATH."""
    if ".".join(str(v) for v in sys.version_info[:2]) == pkg.python:
        return sys.executable
    found = shutil.which(f"python{pkg.python}")
    if found is None:
        raise _unavailable(
            manifest, f"runtime {manifest.name} is resolved for Python {pkg.python}, which is not on PATH", python=pkg.python
        )
    return found


def _install_python_env(
    root: HitchRoot, manifest: InferenceRuntimeManifestV1, pkg: PythonEnvPackage, catalog_path: Path | None, progress: TextIO
) -> InstallResult:
    started = time.monotonic()
    final = runtime_dir(root, manifest)
    hex_id = final.name
    base = final.parent
    base.mkdir(parents=True, exist_ok=True)
    source = runtime_source_dir(manifest.name, catalog_path)
    _check_files(source, pkg, "inference_runtime_integrity_failed", manifest.name)
    clean_leftovers(base, hex_id)
    staging = base / f".staging-{hex_id}-{uuid.uuid4().hex[:8]}"
    try:
        for rel, _sha in _shipped(pkg):
            (staging / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, staging / "files" / rel)
        _check_files(staging / "files", pkg, "inference_runtime_integrity_failed", manifest.name)
        venv = staging / "venv"
        requirements = staging / "files" / pkg.lock_file.path
        py = str(install_requirements(_base_python(manifest, pkg), venv, requirements, progress, "inference_runtime_unavailable"))
        env = InstalledRuntime(manifest, staging, venv / "bin" / "python", _runtime_env(manifest, staging, pkg))
        verify = subprocess.run(
            [py, "-c", _VERIFY.format(module=SERVER_MODULE)],
            capture_output=True,
            text=True,
            env=env.launch_environ(),
            cwd=staging,
        )
        if verify.returncode != 0:
            raise HitchError(
                "inference_runtime_unavailable",
                f"runtime {manifest.name}: the new venv cannot import {SERVER_MODULE}",
                {"stderr_tail": verify.stderr.splitlines()[-20:]},
            )
        versions: dict[str, Any] = json.loads(verify.stdout)
        if not versions.get("shim") and pkg.files:
            raise HitchError("inference_runtime_unavailable", "the runtime did not load its sgl_kernel shim", versions)
        retarget_scripts(venv, staging, final)
        venv_bytes = dir_bytes(venv)
        seconds = round(time.monotonic() - started, 1)
        marker = {
            "schema_version": "1",
            "runtime_id": manifest.runtime_id,
            "name": manifest.name,
            "files": dict(_shipped(pkg)),
            "versions": versions,
            "install_seconds": seconds,
            "venv_bytes": venv_bytes,
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        atomic_write_json(staging / MARKER, marker)
        publish(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    installed = installed_runtime(root, manifest)
    assert installed is not None
    record_manifest(root, manifest)
    return InstallResult(installed, False, seconds, venv_bytes, versions)


def _install_oci(root: HitchRoot, manifest: InferenceRuntimeManifestV1, progress: TextIO) -> InstallResult:
    require_certifiable_pin(manifest)
    assert manifest.package.kind == "oci" and manifest.package.digest is not None
    started = time.monotonic()
    if manifest.pinned_by == "operator":  # pinned from the local engine: it is there and still the pinned one
        found = check_pulled_image(inspect_image(manifest.package.reference()), manifest.package)
        record_manifest(root, manifest)
        return InstallResult(None, True, round(time.monotonic() - started, 1), None, {}, image_bytes=found.size_bytes)
    pulled = pull_image(manifest, progress)  # progress shown; what arrived checked against the pin, else refused
    record_pull(root, manifest, pulled)
    record_manifest(root, manifest)
    seconds = round(time.monotonic() - started, 1)
    return InstallResult(None, False, seconds, None, {}, image_bytes=pulled.size_bytes)


def install_runtime(
    root: HitchRoot,
    manifest: InferenceRuntimeManifestV1,
    *,
    catalog_path: Path | None = None,
    progress: TextIO | None = None,
) -> InstallResult:
    """Install ``manifest`` under ``root`` (idempotent; concurrent installs wait on a file mutex)."""
    out = progress or sys.stderr
    if not isinstance(manifest.package, PythonEnvPackage):
        return _install_oci(root, manifest, out)
    pkg = manifest.package
    _base_python(manifest, pkg)
    mutex_path = root.runtime_install_mutexes / f"{runtime_dir(root, manifest).name}.lock"
    mutex_path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(mutex_path)):
        started = time.monotonic()
        with contextlib.suppress(HitchError):
            found = installed_runtime(root, manifest)
            if found is not None:
                marker = json.loads((found.path / MARKER).read_text())
                record_manifest(root, manifest)
                seconds = round(time.monotonic() - started, 3)
                return InstallResult(found, True, seconds, marker.get("venv_bytes"), marker.get("versions", {}))
        return _install_python_env(root, manifest, pkg, catalog_path, out)
