"""``hitch catalog reproduce ENTRY.dsse.json``: run a signed entry's certification again here and compare.

In order:

1. The entry must verify against the trusted keys (``catalog_signature_invalid`` otherwise).
2. Nothing is fetched and nothing is imported that cannot be matched by digest (:func:`require_inputs`): the
   entry's model and runtime must be here (:func:`harness.lock_inputs.require_lock_inputs`, the rule ``hitch run
   rerun`` follows too), and the lock must be the entry's ``inference_id``: sealed in this root, or kept in the
   entry's evidence (``hardware.lock.served/lock.json``), whose content recomputes to that id before it is stored
   as sealed (``inference_lock_mismatch`` when neither).
3. ``pytest certify --inference ID --reproduces ENTRY`` runs with the entry's device, engine and launcher, into
   its own report directory (its output in ``reproduce.log`` there); ``-k`` runs a selection of the checks,
   exactly as pytest selects them, and then only those are compared.
4. The new entry (signed like any other, naming the entry it reproduces) is compared with the original
   (:func:`certify.entry_compare.compare_entries`); the verdict is ``reproduced``, ``differs`` (with every
   difference) or ``inconclusive`` (with what would decide it), written to ``reproduction.json`` beside the new
   entry. Reproducing an entry with itself is refused (``comparison_with_itself``).

The canary (:mod:`certify.canary`) reads its check changes from the same comparison.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from catalog.evidence import EVIDENCE_DIR, blob_path
from catalog.signing import (
    ENTRY_SUFFIX,
    dev_keys_dir,
    load_entry,
    payload_bytes,
    public_keys_dir_for,
    trusted_keys_dir,
    verify_envelope,
)
from certify.entry_compare import EntryComparison, compare_entries
from certify.options import REPO
from harness.app.locks import keep_sealed_lock, lock_from_json, sealed_lock
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.ids import digest_bytes
from harness.lock_inputs import require_lock_inputs
from harness.paths import HitchRoot, atomic_write_json

__all__ = ["LOCK_EVIDENCE", "Reproduction", "reproduce", "require_inputs"]

LOCK_EVIDENCE = "hardware.lock.served/lock.json"
_LOG = "reproduce.log"


@dataclass
class Reproduction:
    entry: Path
    original: dict[str, Any]
    report_dir: Path
    new_entry: Path
    new: dict[str, Any]
    comparison: EntryComparison
    command: list[str]
    pytest_exit: int

    @property
    def reproduced(self) -> bool:
        return self.comparison.reproduced

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": str(self.entry),
            "reproduction": str(self.new_entry),
            "report_dir": str(self.report_dir),
            "inference_id": self.original.get("inference_id"),
            "level": {"original": self.original.get("level"), "reproduction": self.new.get("level")},
            "reproduces": self.new.get("reproduces"),
            "command": self.command,
            "pytest_exit": self.pytest_exit,
            **self.comparison.to_json(),
        }


def _require_lock(root: HitchRoot, entry: Path, predicate: dict[str, Any]) -> InferenceLockV1:
    inference_id = str(predicate.get("inference_id"))
    try:
        return sealed_lock(root, inference_id)
    except HitchError as exc:
        if exc.code != "inference_lock_mismatch":
            raise
    digest = (predicate.get("evidence") or {}).get(LOCK_EVIDENCE)
    blob = blob_path(entry.parent / EVIDENCE_DIR, digest) if isinstance(digest, str) else None
    if blob is None or not blob.is_file() or digest_bytes(blob.read_bytes()) != digest:
        raise HitchError(
            "inference_lock_mismatch",
            f"the entry's lock {inference_id} is neither sealed in this root nor kept in the entry's evidence",
            {"inference_id": inference_id, "evidence": LOCK_EVIDENCE},
        )
    lock = lock_from_json(json.loads(blob.read_bytes()))  # inference_lock_invalid when its content is not its id
    if lock.inference_id != inference_id:
        raise HitchError("inference_lock_mismatch", "the lock kept in the entry's evidence is another lock", {})
    keep_sealed_lock(
        root, lock, {"inference_id": inference_id, "imported_from_entry": digest_bytes(payload_bytes(load_entry(entry)))}
    )
    return lock


def require_inputs(root: HitchRoot, entry: Path, predicate: dict[str, Any]) -> InferenceLockV1:
    """The entry's model, runtime and lock, present here by digest (see the module docstring)."""
    for name in ("model_id", "runtime_id", "inference_id"):
        if not isinstance(predicate.get(name), str):
            raise HitchError("catalog_entry_invalid", f"the entry has no {name}: it never ran a lock to reproduce", {})
    engine, launcher = str(predicate.get("engine")), str(predicate.get("launcher") or "process")
    require_lock_inputs(root, predicate["model_id"], predicate["runtime_id"], engine, launcher)
    return _require_lock(root, entry, predicate)


def _command(
    predicate: dict[str, Any], lock: InferenceLockV1, entry: Path, report_dir: Path, select: str | None,
    fake_faults: tuple[str, ...], sign_key: Path | None,
) -> list[str]:  # fmt: skip
    cmd = [
        sys.executable, "-m", "pytest", "certify", "-p", "no:cacheprovider", "-q", "-rfE",
        "--device", str(predicate["device"]), "--engine", str(predicate["engine"]),
        "--launcher", str(predicate.get("launcher") or "process"), "--inference", lock.inference_id,
        "--reproduces", str(entry), "--report-dir", str(report_dir),
    ]  # fmt: skip
    if lock.execution.backend_certification == "uncertified":
        cmd.append("--allow-uncertified")
    if select:
        cmd += ["-k", select]
    for fault in fake_faults:
        cmd += ["--fake-fault", fault]
    if sign_key is not None:
        cmd += ["--sign-key", str(sign_key)]
    return cmd


def _new_entry(report_dir: Path, log: Path) -> Path:
    found = sorted(report_dir.glob(f"*{ENTRY_SUFFIX}"))
    if len(found) != 1:
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
        raise HitchError(
            "internal_error",
            f"the reproduction left {len(found)} signed entries in {report_dir} (one expected); see {log}",
            {"report_dir": str(report_dir), "log_tail": tail},
        )
    return found[0]


def reproduce(
    root: HitchRoot,
    entry: Path,
    keys: list[Path],
    report_dir: Path,
    *,
    select: str | None = None,
    fake_faults: tuple[str, ...] = (),
    sign_key: Path | None = None,
) -> Reproduction:
    """Verify ``entry``, check its inputs are here, certify its lock again into ``report_dir`` and compare."""
    original = verify_envelope(load_entry(entry), keys).predicate
    lock = require_inputs(root, entry, original)
    report_dir.mkdir(parents=True, exist_ok=True)
    cmd = _command(original, lock, entry.resolve(), report_dir, select, fake_faults, sign_key)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HITCH_CERTIFY_")} | {"HITCH_ROOT": str(root.path)}
    log = report_dir / _LOG
    with log.open("wb") as out:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    new_path = _new_entry(report_dir, log)
    new_keys = [*keys, trusted_keys_dir(), dev_keys_dir(root)]
    if sign_key is not None:
        new_keys.append(public_keys_dir_for(sign_key))
    new = verify_envelope(load_entry(new_path), new_keys).predicate
    comparison = compare_entries(original, new, selection=bool(select))
    result = Reproduction(entry, original, report_dir, new_path, new, comparison, cmd, done.returncode)
    atomic_write_json(report_dir / "reproduction.json", result.to_json())
    return result
