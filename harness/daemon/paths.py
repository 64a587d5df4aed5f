"""Where one root's daemon keeps its files: ``inference/daemon/`` under the root (0700).

- ``daemon.sock``: the management API (0600). A unix socket path is limited to ~107 bytes; when the
  root is deeper than that allows, the socket lives in a per-user 0700 directory
  (``$XDG_RUNTIME_DIR/hitch`` when that is short enough, else ``/tmp/hitch-<uid>``) under a name derived
  from the root's path, and
  every client computes the same place;
- ``token``: the random daemon token (0600), new at every daemon start;
- ``daemon.json``: pid, start time, socket (no secret); ``daemon.lock``: held for the daemon's life
  (flock: released by the kernel even after SIGKILL, so a restart never waits on a dead daemon);
- ``daemon.log``: the daemon's own log (0600).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.ids import sha256_hex
from harness.paths import HitchRoot, SubPath, ensure_private_dir

__all__ = ["DaemonPaths"]

_MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class DaemonPaths:
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
        base = os.environ.get("XDG_RUNTIME_DIR")
        if base and len(str(Path(base) / "hitch" / name)) <= _MAX_SOCKET_PATH:
            return Path(base) / "hitch" / name
        return Path("/tmp") / f"hitch-{os.getuid()}" / name  # a deep XDG_RUNTIME_DIR cannot hold it either

    token = SubPath("dir", "token")
    info = SubPath("dir", "daemon.json")
    lock = SubPath("dir", "daemon.lock")
    log = SubPath("dir", "daemon.log")
