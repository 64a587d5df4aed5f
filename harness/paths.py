"""The HITCH_ROOT layout (spec §6.4) and safe file writing.

``--root`` beats ``HITCH_ROOT`` beats ``$XDG_DATA_HOME/hitch`` (``~/.local/share/hitch``).
Private directories are 0700 and secret files 0600; every write that publishes a file
goes through a temp file + fsync + ``os.replace`` so readers never see half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "HitchRoot",
    "atomic_write_bytes",
    "atomic_write_json",
    "ensure_private_dir",
    "resolve_root",
    "write_secret",
]


def resolve_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser().absolute()
    env = os.environ.get("HITCH_ROOT")
    if env:
        return Path(env).expanduser().absolute()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "hitch"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and force mode 0700 on it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, value: Any, mode: int = 0o644) -> None:
    atomic_write_bytes(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode(), mode)


def write_secret(path: Path, secret: str) -> None:
    """A secret file: 0600 inside a 0700 directory, written atomically."""
    ensure_private_dir(path.parent)
    atomic_write_bytes(path, secret.encode(), mode=0o600)


@dataclass(frozen=True)
class HitchRoot:
    """All paths under one HITCH_ROOT; nothing outside it is written by the harness."""

    path: Path

    @classmethod
    def at(cls, explicit: str | os.PathLike[str] | None = None) -> HitchRoot:
        return cls(resolve_root(explicit))

    # store/
    @property
    def model_files(self) -> Path:
        return self.path / "store" / "model-files" / "sha256"

    @property
    def models(self) -> Path:
        return self.path / "store" / "models" / "sha256"

    @property
    def runtimes(self) -> Path:
        return self.path / "store" / "inference-runtimes" / "sha256"

    @property
    def sealed_locks(self) -> Path:
        return self.path / "store" / "inference-locks" / "sha256"

    @property
    def staging(self) -> Path:
        """Temp area on the same filesystem as the store, so publish is a rename."""
        return self.path / "store" / ".staging"

    # indexes/
    @property
    def aliases_file(self) -> Path:
        return self.path / "indexes" / "models" / "aliases.json"

    # inference/
    @property
    def services(self) -> Path:
        return self.path / "inference" / "services"

    @property
    def private(self) -> Path:
        return self.path / "inference" / "private"

    @property
    def daemon_dir(self) -> Path:
        """The daemon's socket, token, info, lock and log (:class:`harness.daemon.paths.DaemonPaths`)."""
        return self.path / "inference" / "daemon"

    @property
    def gateway_dir(self) -> Path:
        """The daemon gateway's state: bindings, evidence rows, capture."""
        return self.path / "inference" / "gateway"

    @property
    def agent_profiles(self) -> Path:
        """Recorded agent-harness compatibility profiles."""
        return self.path / "inference" / "harness-profiles"

    @property
    def runtime_envs(self) -> Path:
        """Installed python-env runtimes (private venvs), one folder per runtime digest."""
        return self.path / "inference" / "runtimes"

    @property
    def tool_envs(self) -> Path:
        """Benchmark tools in private venvs (e.g. ``aiperf-0.13.0``), one folder per tool and version."""
        return self.path / "tools"

    @property
    def cache(self) -> Path:
        return self.path / "cache" / "inference"

    @property
    def file_locks(self) -> Path:
        return self.path / "locks" / "inference"

    @property
    def runs(self) -> Path:
        return self.path / "runs"

    def run_inference_dir(self, run_id: str) -> Path:
        """One run's inference evidence (``runs/<run id>/inference``)."""
        return self.runs / run_id / "inference"

    def service_dir(self, service_id: str) -> Path:
        return self.services / service_id

    def private_dir(self, service_id: str) -> Path:
        return ensure_private_dir(self.private / service_id)

    def digest_dir(self, base: Path, digest: str) -> Path:
        """``base/<hex>`` for an id ``sha256:<hex>``."""
        return base / digest.split(":", 1)[1]
