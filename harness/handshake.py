"""The CLI↔daemon handshake (spec §14): API version, capabilities and the code each side runs.

A daemon serves one root for as long as it lives, so a ``hitch`` of another checkout (or of the same checkout
after an update) can find a daemon started from other code on the same ``HITCH_ROOT``: field names, request
bodies and routes may mean something else there, and the answers would be confusing at best. Before its first
call that does work, a client asks ``GET /v1/handshake`` and refuses with ``daemon_upgrade_required`` (naming
both sides and what differs) when:

- the daemon has no handshake route (it is older than the handshake itself);
- its :data:`API_VERSION` is not the client's;
- it lacks a capability the client needs (:data:`CAPABILITIES`: what this code's daemon offers);
- it runs other code: :func:`code_identity` (sha256 over the path and bytes of every Python source file of the
  packages the daemon runs: ``harness``, ``gateway`` and ``fixtures``, whose fake engine the daemon starts)
  differs from the client's. Capabilities alone would miss a behaviour that changed under the same name.

Status, handshake and shutdown need no handshake: ``hitch daemon status`` shows whichever daemon answers and
``hitch daemon stop`` stops it, which is the remedy the error names.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

from harness.errors import HitchError

__all__ = [
    "API_VERSION",
    "CAPABILITIES",
    "HANDSHAKE_EXEMPT",
    "HANDSHAKE_PATH",
    "check_handshake",
    "code_identity",
    "handshake_answer",
]

API_VERSION = "1"
CAPABILITIES: tuple[str, ...] = (
    "handshake.v1",
    "services.v1",
    "prepare.v1",
    "runs.v1",
    "runs.sealed-evidence.v1",  # inference.ref.json + ref_digest in run.json
    "runs.model-identity.v1",  # ModelIdentityV1 in the execution evidence
    "runs.rerun.v1",  # rerun_of in a run request
)
HANDSHAKE_PATH = "/v1/handshake"
HANDSHAKE_EXEMPT = frozenset({HANDSHAKE_PATH, "/v1/status", "/v1/shutdown"})
_PACKAGES = ("harness", "gateway", "fixtures")


@functools.cache
def code_identity() -> dict[str, Any]:
    """``{"digest": "sha256:...", "files": N, "source": DIR}`` of the Python sources this process runs."""
    base = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    count = 0
    for package in _PACKAGES:
        top = base / package
        for path in sorted(top.rglob("*.py")) if top.is_dir() else ():
            rel = path.relative_to(base).as_posix()
            h.update(rel.encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
            count += 1
    return {"digest": "sha256:" + h.hexdigest(), "files": count, "source": str(base)}


def handshake_answer() -> dict[str, Any]:
    """What the daemon answers on :data:`HANDSHAKE_PATH`."""
    return {"api_version": API_VERSION, "capabilities": list(CAPABILITIES), "code": code_identity(), "pid": os.getpid()}


def _refuse(root: str, why: str, details: dict[str, Any]) -> HitchError:
    return HitchError(
        "daemon_upgrade_required",
        f"the daemon of {root} {why}; stop it (`hitch daemon stop --root {root}`) and run the command again",
        {"root": root, "client_api_version": API_VERSION, "client_code": code_identity(), **details},
    )


def check_handshake(root: str, status: int, answer: Any) -> None:
    """Accept the daemon's handshake answer (HTTP ``status`` and its JSON, or None) or raise
    ``daemon_upgrade_required``."""
    if status == 404 or not isinstance(answer, dict) or "api_version" not in answer:
        raise _refuse(root, "predates the CLI↔daemon handshake (older code)", {"daemon_status": status})
    details = {
        "daemon_pid": answer.get("pid"),
        "daemon_api_version": answer.get("api_version"),
        "daemon_code": answer.get("code"),
    }
    if answer.get("api_version") != API_VERSION:
        raise _refuse(root, f"speaks API version {answer.get('api_version')}, this hitch {API_VERSION}", details)
    offered = answer.get("capabilities")
    missing = sorted(set(CAPABILITIES) - set(offered if isinstance(offered, list) else []))
    if missing:
        raise _refuse(root, f"lacks {', '.join(missing)}", {**details, "missing_capabilities": missing})
    code = answer.get("code")
    if not isinstance(code, dict) or code.get("digest") != code_identity()["digest"]:
        source = code.get("source") if isinstance(code, dict) else None
        raise _refuse(root, f"runs other code (from {source}) than this hitch (from {code_identity()['source']})", details)
