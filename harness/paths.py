"""The HITCH_ROOT layout (spec §6.4) and safe file writing: every path below a root is named here, once.

``--root`` beats ``HITCH_ROOT`` beats ``$XDG_DATA_HOME/hitch`` (``~/.local/share/hitch``).
:class:`HitchRoot` is the layout table; :class:`DaemonPaths` the files of the root's daemon.
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
from typing import Any, cast

from harness.ids import sha256_hex
from harness.settings import settings

__all__ = [
    "DaemonPaths",
    "HitchRoot",
    "SubPath",
    "atomic_write_bytes",
    "atomic_write_json",
    "ensure_private_dir",
    "resolve_root",
    "write_secret",
]


def resolve_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser().absolute()
    return settings().hitch_root


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


class SubPath:
    """A fixed path below a directory its owner holds (the attribute named ``base``): one row of a layout
    table, so a layout reads as a table and each path is spelled once."""

    def __init__(self, base: str, *parts: str) -> None:
        self.base = base
        self.parts = parts

    def __get__(self, owner_obj: object, owner: type | None = None) -> Path:
        return cast(Path, getattr(owner_obj, self.base)).joinpath(*self.parts)


def _under(*parts: str) -> SubPath:
    """A row of :class:`HitchRoot`'s table: a path below the root."""
    return SubPath("path", *parts)


@dataclass(frozen=True)
class HitchRoot:
    """All paths under one HITCH_ROOT; nothing outside it is written by the harness."""

    path: Path

    @classmethod
    def at(cls, explicit: str | os.PathLike[str] | None = None) -> HitchRoot:
        return cls(resolve_root(explicit))

    # store/: content-addressed, published by rename from staging (same filesystem)
    model_files = _under("store", "model-files", "sha256")
    models = _under("store", "models", "sha256")
    runtimes = _under("store", "inference-runtimes", "sha256")
    sealed_locks = _under("store", "inference-locks", "sha256")  # sealed lock.json + validation.json
    model_verifications = _under("store", "model-verifications", "sha256")  # <model hex>/<inference hex>.json
    quarantine = _under("store", "quarantine", "sha256")  # <model hex>/<ns>/{manifest.json,files/,reason.json}
    staging = _under("store", ".staging")
    # indexes/
    aliases_file = _under("indexes", "models", "aliases.json")
    # inference/
    services = _under("inference", "services")
    private = _under("inference", "private")
    daemon_dir = _under("inference", "daemon")  # socket, token, info, mutex, log (DaemonPaths)
    gateway_dir = _under("inference", "gateway")  # the daemon gateway's bindings, evidence rows, capture
    # agent-harness compatibility profiles; the folder keeps its first name so existing roots still read
    agent_profiles = _under("inference", "harness-profiles")
    runtime_envs = _under("inference", "runtimes")  # python-env runtimes' private venvs, one per runtime digest
    tool_envs = _under("tools")  # tools' private venvs (``aiperf-0.13.0``, ``harbor/<hex>``), one per tool and version
    cache = _under("cache", "inference")
    fixture_cache = _under("cache", "fixtures")  # built test checkpoints and downloaded wheels
    reference_cache = _under("cache", "reference")  # transformers reference runs (fixtures.reference)
    mutexes = _under("locks", "inference")  # advisory mutex files serialising store writers (aliases, imports)
    runtime_install_mutexes = _under("locks", "runtimes")  # one advisory mutex file per runtime install
    keys = _under("keys")  # the development signing key; its public half under keys/public
    catalog_entries = _under("catalog", "entries")  # signed catalog entries written here (beside the checkout's)
    runtime_pins = _under("catalog", "runtime-pins.json")  # the operator's overlay of `hitch runtime pin`
    runs = _under("runs")
    evals = _under("evals")  # one folder per evaluation (``hitch eval``): evaluation.json, trials, driver log
    certify = _under("certify")  # what a certification session's processes share (keys, mutexes, images' mutex)

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


_MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class DaemonPaths:
    """Where one root's daemon keeps its files: ``inference/daemon/`` under the root (0700).

    - ``daemon.sock``: the management API (0600). A unix socket path is limited to ~107 bytes; when the
      root is deeper than that allows, the socket lives in a per-user 0700 directory
      (``$XDG_RUNTIME_DIR/hitch`` when that is short enough, else ``/tmp/hitch-<uid>``) under a name derived
      from the root's path, and every client computes the same place;
    - ``token``: the random daemon token (0600), new at every daemon start;
    - ``daemon.json``: pid, start time, socket (no secret); ``daemon.lock``, the daemon's mutex: held for its life
      (flock: released by the kernel even after SIGKILL, so a restart never waits on a dead daemon);
    - ``daemon.log``: the daemon's own log (0600).
    """

    root: HitchRoot

    @property
    def dir(self) -> Path:
        return self.root.daemon_dir

    def ensure(self) -> Path:
        return ensure_private_dir(self.dir)

    @property
    def socket(self) -> Path:
        preferred = self.dir / "daemon.sock"
        if len(str(preferred)) <= _MAX_SOCKET_PATH:
            return preferred
        name = f"d-{sha256_hex(str(self.root.path.resolve()).encode())[:20]}.sock"
        base = settings().xdg_runtime_dir
        if base is not None and len(str(base / "hitch" / name)) <= _MAX_SOCKET_PATH:
            return base / "hitch" / name
        return Path("/tmp") / f"hitch-{os.getuid()}" / name  # a deep XDG_RUNTIME_DIR cannot hold it either

    token = SubPath("dir", "token")
    info = SubPath("dir", "daemon.json")
    mutex = SubPath("dir", "daemon.lock")
    log = SubPath("dir", "daemon.log")
