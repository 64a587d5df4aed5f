"""``hitch catalog reproduce`` on the fake engine (issue 30 item 5, its Done-when).

One certification of a small selection of checks (``-k "continuations or sealed_lock"``: the greedy
continuations and the sealed lock kept as evidence) signs an entry; ``hitch catalog reproduce`` runs the same
selection with the entry's exact lock and says ``reproduced``; run again with the fake engine's ``flip_token``
fault (one greedy token changed at one position) it says ``differs`` and names exactly the continuations, each
at the changed position, and nothing else. The reproduction with the fault also finds the sealed lock gone from
the root and takes it from the entry's evidence (matched by its inference id). Refusals: an untrusted signer,
a model that is not in the root, a runtime that is not installed, a lock neither sealed nor kept as evidence.
The selection keeps this test at three short fake sessions; the full suite is the same command without ``-k``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from catalog.signing import (
    build_statement,
    decode_statement_unverified,
    ensure_dev_key,
    load_entry,
    payload_bytes,
    sign_envelope,
    subjects_from_predicate,
    write_entry,
)
from certify.options import REPORT_ENV, SESSION_ENV
from certify.reproduce import LOCK_EVIDENCE
from harness.compare.figures import DIFFERS_EXIT_CODE
from harness.ids import digest_bytes
from harness.paths import HitchRoot

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("certify")]
SELECT = "continuations or sealed_lock"


def _env(root: HitchRoot) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (REPORT_ENV, SESSION_ENV)}
    return env | {"HITCH_ROOT": str(root.path), "COLUMNS": "200"}


def _certify(root: HitchRoot, out: Path) -> Path:
    cmd = [sys.executable, "-m", "pytest", "certify", "--engine", "fake", "--device", "cpu", "--report-dir", str(out),
           "-p", "no:cacheprovider", "-q", "-k", SELECT]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=_env(root), capture_output=True, text=True, timeout=900)
    entries = list(out.glob("*.dsse.json"))
    assert len(entries) == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    return entries[0]


def _reproduce(root: HitchRoot, entry: Path, out: Path, *extra: str, code: int) -> dict[str, Any]:
    cmd = [sys.executable, "-c", "from harness.cli.app import main; main()", "catalog", "reproduce", str(entry),
           "--keys", str(root.keys / "public"), "--report-dir", str(out), "--root", str(root.path), "--json", *extra]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=_env(root), capture_output=True, text=True, timeout=900)
    assert proc.returncode == code, proc.stdout[-3000:] + proc.stderr[-2000:]
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _predicate(entry: Path) -> dict[str, Any]:
    predicate: dict[str, Any] = decode_statement_unverified(load_entry(entry))["predicate"]
    return predicate


def _resign(root: HitchRoot, entry: Path, out: Path, **changes: Any) -> Path:
    predicate = {**_predicate(entry), **changes}
    envelope = sign_envelope(build_statement(predicate, subjects_from_predicate(predicate)), ensure_dev_key(root))
    out.mkdir(parents=True, exist_ok=True)
    return write_entry(envelope, out)


def test_an_entry_is_reproduced_and_a_changed_token_is_named(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    entry = _certify(root, tmp_path / "original")
    original = _predicate(entry)
    statuses = {c["id"]: c["status"] for c in original["checks"] if c["status"] != "not_run"}
    assert statuses == {"correctness.continuations": "passed", "hardware.lock.served": "passed"}
    assert LOCK_EVIDENCE in original["evidence"]

    same = _reproduce(root, entry, tmp_path / "again", "-k", SELECT, code=0)
    assert same["verdict"] == "reproduced" and same["differences"] == []
    assert same["compared"]["continuations"] == 16 and same["compared"]["checks"] == 2
    assert same["reproduces"] == {
        "entry_sha256": digest_bytes(payload_bytes(load_entry(entry))), "inference_id": original["inference_id"]
    }  # fmt: skip
    assert _predicate(Path(same["reproduction"]))["reproduces"] == same["reproduces"]  # the new entry names it
    assert json.loads((tmp_path / "again" / "reproduction.json").read_text())["verdict"] == "reproduced"

    # the sealed lock gone from the root: the reproduction takes it from the entry's evidence, by its id
    shutil.rmtree(root.digest_dir(root.sealed_locks, original["inference_id"]))
    flipped = _reproduce(root, entry, tmp_path / "flipped", "-k", SELECT, "--fake-fault", "flip_token:at=3",
                         code=DIFFERS_EXIT_CODE)  # fmt: skip
    assert flipped["verdict"] == "differs"
    assert {d["kind"] for d in flipped["differences"]} == {"continuation"}
    assert sorted(d["item"] for d in flipped["differences"]) == sorted(
        f"correctness.continuations/{api}/{i}" for api in ("chat", "responses") for i in range(8)
    )
    # the fake engine gives no tokens: the text parts where the third token's text begins, never before it
    original_rows = {(r["api"], r["prompt"]): r for r in next(
        c for c in original["checks"] if c["id"] == "correctness.continuations")["details"]["continuations"]}  # fmt: skip
    for d in flipped["differences"]:
        _, api, i = d["item"].rsplit("/", 2)
        at = int(d["detail"].rsplit("character ", 1)[1].split()[0])
        assert 0 < at < len(original_rows[(api, int(i))]["text"])
    assert (root.digest_dir(root.sealed_locks, original["inference_id"]) / "lock.json").is_file()


def test_reproduce_refuses_what_it_cannot_match_by_digest(tmp_path: Path) -> None:
    root = HitchRoot(tmp_path / "root")
    entry = _certify(root, tmp_path / "original")
    original = _predicate(entry)

    # an entry whose signer is not trusted: the default trust is the checkout's catalog/keys
    cmd = [sys.executable, "-c", "from harness.cli.app import main; main()", "catalog", "reproduce", str(entry),
           "--root", str(root.path), "--json"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=_env(root), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and json.loads(proc.stdout)["error"]["code"] == "catalog_signature_invalid"

    # the model is not in this root (another, empty root that trusts the same key)
    other = HitchRoot(tmp_path / "other")
    shutil.copytree(root.keys, other.keys)
    err = _error(other, entry, tmp_path / "x1")
    assert err["code"] == "local_model_not_found" and err["details"]["model_id"] == original["model_id"]

    # the runtime: a real-engine entry of the same lock, whose runtime this root never installed
    sglang = _resign(root, entry, tmp_path / "sglang", engine="sglang")
    err = _error(root, sglang, tmp_path / "x2")
    assert err["code"] == "inference_runtime_unavailable" and err["details"]["runtime_id"] == original["runtime_id"]

    # the lock neither sealed here nor kept in the entry's evidence
    shutil.rmtree(root.digest_dir(root.sealed_locks, original["inference_id"]))
    bare = _resign(root, entry, tmp_path / "bare", evidence={})
    err = _error(root, bare, tmp_path / "x3")
    assert err["code"] == "inference_lock_mismatch" and err["details"]["inference_id"] == original["inference_id"]
    assert not (tmp_path / "x3").exists()  # refused before anything ran


def _error(root: HitchRoot, entry: Path, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-c", "from harness.cli.app import main; main()", "catalog", "reproduce", str(entry),
           "--keys", str(root.keys / "public"), "--report-dir", str(out), "--root", str(root.path), "--json"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=_env(root), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout
    error: dict[str, Any] = json.loads(proc.stdout)["error"]
    return error
