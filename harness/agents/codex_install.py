"""Where the pinned Codex CLI lives and proof that it is the pinned version.

The project installs ``@openai/codex@CODEX_VERSION`` (with its optional native package) into
``<repo>/.tools/codex`` (``scripts/ci/install_codex.sh``, ``make codex``). :func:`find_codex` locates the
native binary there (or under ``HITCH_CODEX_PREFIX``), runs ``codex --version`` and refuses anything that is
not the pinned version: only an exact, certified artifact is ever run (spec §10.3). The user's PATH and
``~/.codex`` are never consulted.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HitchError
from harness.ids import digest_bytes
from harness.settings import settings

__all__ = ["CODEX_PACKAGE", "CODEX_VERSION", "CodexInstall", "default_prefix", "find_codex"]

CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.171.0"  # keep equal to scripts/ci/install_codex.sh
_REPO = Path(__file__).resolve().parents[2]
_NATIVE = "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"


@dataclass(frozen=True)
class CodexInstall:
    binary: Path
    version: str
    artifact: str  # "npm:@openai/codex@<version>"
    binary_digest: str  # sha256 of the native binary: the exact artifact that ran


def default_prefix() -> Path:
    return settings().codex_prefix or _REPO / ".tools" / "codex"


def _missing(prefix: Path, why: str) -> HitchError:
    return HitchError(
        "harness_unavailable",
        f"Codex {CODEX_VERSION} is not installed under {prefix} ({why}); run `make codex` (scripts/ci/install_codex.sh)",
        {"prefix": str(prefix), "version": CODEX_VERSION, "run_first": ["make codex"]},
    )


@functools.lru_cache(maxsize=8)
def _probe(binary: Path, mtime_ns: int, size: int) -> tuple[str, str]:
    del mtime_ns, size  # cache keys only
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}, check=False
    )
    version = out.stdout.strip().rsplit(" ", 1)[-1] if out.returncode == 0 else ""
    return version, digest_bytes(binary.read_bytes())


def find_codex(prefix: Path | None = None) -> CodexInstall:
    """The pinned native Codex binary, or ``harness_unavailable`` saying how to install it."""
    prefix = prefix or default_prefix()
    binary = prefix / _NATIVE
    if not binary.is_file():
        raise _missing(prefix, "no native binary")
    st = binary.stat()
    try:
        version, digest = _probe(binary, st.st_mtime_ns, st.st_size)
    except (OSError, subprocess.SubprocessError) as exc:
        raise _missing(prefix, f"it does not run: {type(exc).__name__}") from exc
    if version != CODEX_VERSION:
        raise _missing(prefix, f"found version {version or 'unknown'!r}, pinned {CODEX_VERSION}")
    return CodexInstall(binary, version, f"npm:{CODEX_PACKAGE}@{version}", digest)
