"""The secrets scan: no engine key, admin key or run token at rest where it should not be.

Every process of a session names the secrets it comes to know (the engine key, each run's token) in the
session's ledger (:func:`remember`: 0600 files in a 0700 ``private`` folder). The scan runs at session end,
once every other check has run and before the engine is stopped (``security.secrets.*``, declared in the
security suite and run by the plugin): :func:`session_secrets` reads the ledger (and the service's admin key),
:func:`scan_files` reads every file under HITCH_ROOT and the run's evidence store. Only the 0600 files of
``private`` folders may hold a secret; no log may. The ledger itself is left out of the scan (it would make
the "the needles are right" proof pass by itself) and removed after it (:func:`forget`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from harness.paths import HitchRoot, write_secret

__all__ = ["ScanResult", "forget", "is_log", "remember", "scan_files", "session_secrets"]

MIN_SECRET_CHARS = 8  # shorter values would match by chance
MAX_FILE_BYTES = 256 << 20


def remember(ledger: Path, name: str, value: str) -> None:
    """Name ``value`` (a secret this session created or was given) for the session-end scan."""
    write_secret(ledger / name, value)


def forget(ledger: Path) -> None:
    shutil.rmtree(ledger, ignore_errors=True)
    with contextlib.suppress(OSError):  # its private folder, when nothing else is in it
        ledger.parent.rmdir()


def session_secrets(ledger: Path, root: HitchRoot, service_id: str | None) -> dict[str, str]:
    """name -> value of every secret the session named, and the service's admin key when it has one."""
    out: dict[str, str] = {}
    if ledger.is_dir():
        for path in sorted(ledger.iterdir()):
            out[path.name] = path.read_text(encoding="utf-8").strip()
    if service_id:
        admin = root.private / service_id / "admin-api-key"
        if admin.is_file():
            out["admin_key"] = admin.read_text(encoding="utf-8").strip()
    return {k: v for k, v in out.items() if len(v) >= MIN_SECRET_CHARS}


def is_log(path: Path) -> bool:
    return path.suffix in (".log", ".jsonl") or ".log." in path.name


@dataclass
class ScanResult:
    hits: list[str] = field(default_factory=list)  # "file (mode): secret names"
    scanned: list[str] = field(default_factory=list)  # the files read (relative)
    skipped: list[str] = field(default_factory=list)  # too large, or removed while scanning
    private_hits: int = 0  # 0600 files of private folders holding a secret (where they belong)


def _files(tops: tuple[Path, ...], leave_out: tuple[Path, ...]) -> list[Path]:
    out: list[Path] = []
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(top):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if here / d not in leave_out]
            out.extend(here / f for f in filenames if not (here / f).is_symlink() and (here / f).is_file())
    return sorted(out)


def scan_files(
    root: HitchRoot, evidence_dir: Path, secrets: dict[str, str], *, logs: bool, leave_out: tuple[Path, ...] = ()
) -> ScanResult:
    """Look for ``secrets`` in the logs (``logs``) or in every other file under the root and the evidence store.

    The installed runtime environments are left out (GBs of wheels written at install time, before any
    secret of the session existed), and so is ``leave_out``. A file removed between the listing and the read
    holds nothing at rest; it is named in ``skipped``."""
    needles = {name: value.encode() for name, value in secrets.items()}
    result = ScanResult()
    for path in _files((root.path, evidence_dir), (root.runtime_envs, *leave_out)):
        if is_log(path) != logs:  # the two checks split the files: logs, and everything else
            continue
        rel = next((path.relative_to(top) for top in (root.path, evidence_dir.parent) if path.is_relative_to(top)), path)
        try:
            st = path.stat()
            if st.st_size > MAX_FILE_BYTES:
                result.skipped.append(f"{rel} (too large)")
                continue
            data = path.read_bytes()
        except FileNotFoundError:
            result.skipped.append(f"{rel} (removed while scanning)")
            continue
        mode = stat.S_IMODE(st.st_mode)
        result.scanned.append(str(rel))
        found = sorted(name for name, needle in needles.items() if needle in data)
        if found and not logs and mode == 0o600 and "private" in rel.parts:
            result.private_hits += 1
        elif found:
            result.hits.append(f"{rel} ({oct(mode)}): {', '.join(found)}")
    return result
