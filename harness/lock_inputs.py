"""The model and runtime a lock names, required present here by digest (never fetched, never substituted).

Owns :func:`require_lock_inputs`, what ``hitch run rerun`` and ``hitch catalog reproduce`` ask before they run a
lock again: the model must be in this root's store under its ``model_id`` with every file intact
(``local_model_not_found`` naming the id; ``local_model_integrity_failed`` naming the changed file), and the
runtime must be this checkout's catalog entry of ``runtime_id`` and be here for the engine and launcher that will
run it — installed (a process launch of real SGLang) or its pinned image in Docker (an OCI one);
``inference_runtime_unavailable`` names it and why. The fake engine runs from the checkout: its runtime only
names the identity. A runtime whose content changed has another ``runtime_id``, so "changed" and "gone" are the
same refusal here.
"""

from __future__ import annotations

from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.runtimes.install import installed_runtime
from harness.runtimes.pins import inspect_image
from harness.store import read_manifest, verify_or_quarantine

__all__ = ["require_lock_inputs", "require_model", "require_runtime"]


def require_model(root: HitchRoot, model_id: str) -> None:
    try:
        manifest = read_manifest(root, model_id)
    except HitchError as exc:
        raise HitchError(
            "local_model_not_found",
            f"model {model_id} is not in this root's store: import the same checkpoint (`hitch models add DIR`)",
            {"model_id": model_id},
        ) from exc
    verify_or_quarantine(root, manifest)  # local_model_integrity_failed names the file; the object is quarantined


def require_runtime(root: HitchRoot, runtime_id: str, engine: str, launcher: str) -> None:
    try:
        runtime = get_runtime(runtime_id)
    except HitchError as exc:
        raise HitchError(
            "inference_runtime_unavailable",
            f"runtime {runtime_id} is not in this checkout's catalog (gone, or changed: a changed runtime has another id)",
            {"runtime_id": runtime_id, "why": exc.message},
        ) from exc
    if engine != "sglang":
        return
    why = None
    if launcher == "oci":
        if runtime.package.kind != "oci" or runtime.package.digest is None:
            why = "it has no pinned image"
        else:
            try:
                inspect_image(runtime.package.reference())
            except HitchError as exc:
                why = exc.message
    elif installed_runtime(root, runtime) is None:  # an altered install raises inference_runtime_integrity_failed
        why = "it is not installed"
    if why is not None:
        raise HitchError(
            "inference_runtime_unavailable",
            f"runtime {runtime.name} ({runtime_id}) is not here ({why}); nothing is installed or pulled for a run "
            f"that must be the same again: `hitch runtime install {runtime.name}` first",
            {"runtime": runtime.name, "runtime_id": runtime_id, "why": why},
        )


def require_lock_inputs(root: HitchRoot, model_id: str, runtime_id: str, engine: str, launcher: str) -> None:
    require_model(root, model_id)
    require_runtime(root, runtime_id, engine, launcher)
