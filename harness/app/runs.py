"""Open and end a run: the service a run asks for, and how its owner tells the daemon it ended.

:func:`run_service_request` turns what ``hitch run`` and ``hitch eval harbor run`` were given into a
:class:`~harness.app.requests.RunRequest`: a prepared identity (``inference``: the device and profile come from
its sealed lock, and a model given beside it must be the lock's) or a model resolved by the one device rule
(:func:`harness.app.choice.resolve_choice`); the runtime is made ready first (:func:`ensure_runtime`).
:func:`end_run` tells the daemon how a run ended and answers the record it keeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from harness.app.choice import ALLOW_FLAG, resolve_choice
from harness.app.daemon_client import DaemonClient
from harness.app.requests import FinishRunRequest, RunErrorIn, RunRequest, parse_request
from harness.app.run_store import RunStore
from harness.app.service import ensure_runtime, run_image, run_request, runtime_of
from harness.app.spec import ServiceSpec
from harness.contracts.base import parse_record
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.lock import ProfileShort, load_sealed_lock, served_device
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.store import resolve_model

__all__ = ["RunAsk", "end_run", "run_service_request", "same_model", "served_model_id"]


class RunAsk(ServiceSpec):
    """How a run chooses its service (``hitch run``, ``hitch eval harbor run``): a sealed lock (``inference``), or
    the service spec resolved by the one rule; ``offline`` never installs or pulls."""

    inference: str | None = None
    offline: bool = False

    @classmethod
    def of(cls, **given: Any) -> RunAsk:
        """``given`` (a command's options) checked; a bad value is a ``usage_error``."""
        return parse_record(cls, given, "usage_error")


def same_model(root: HitchRoot, model: str | None, lock: InferenceLockV1) -> None:
    """``--inference`` with ``--model``: the model must be the lock's, or the run would serve another one."""
    if model is None:
        return
    given = resolve_model(root, model).model_id
    if given != lock.model_id:
        raise HitchError(
            "inference_lock_mismatch",
            f"--model {model} is not the model of {lock.inference_id}; drop --model or prepare a lock for it",
            {"model": model, "model_id": given, "lock_model_id": lock.model_id, "inference_id": lock.inference_id},
        )


def served_model_id(root: HitchRoot, request: RunRequest) -> str:
    """The model a run request serves, before any service starts: its pinned lock's, else its model's."""
    if request.inference_id:
        return load_sealed_lock(root, request.inference_id).model_id
    return resolve_model(root, str(request.model)).model_id


def run_service_request(root: HitchRoot, ask: RunAsk, root_flag: Path | None = None, **run: Any) -> RunRequest:
    """The request of a run on the service ``ask`` names (``run``: run_id, harness, capture, ... of the request).

    Checks every choice before anything starts; installs a missing runtime unless ``ask.offline``."""
    if ask.inference is not None:
        if ask.device != "auto" or ask.profile is not None:
            raise HitchError("usage_error", "--inference pins the device and profile; drop --device/--profile", {})
        if ask.generation is not None:
            raise HitchError("usage_error", "--inference pins the lock's sampling; drop --generation", {})
        lock = load_sealed_lock(root, ask.inference)
        same_model(root, ask.model, lock)
        rt = get_runtime(lock.runtime_id)
        backend = served_device(lock.execution.platform.backend)
        argv = [ask.model or f"local/{lock.model_id}", "--device", backend, "--runtime", rt.name]
        if lock.execution.backend_certification == "uncertified":
            argv.append(ALLOW_FLAG)
        # the lock pins the runtime: an engine left to the rule is SGLang, launched as the runtime is packaged
        engine = ask.engine or "sglang"
        launcher = ask.launcher or ("oci" if rt.package.kind == "oci" and engine == "sglang" else "process")
        # first: --offline names the pin/prepare commands before an unpinned image is refused
        ensure_runtime(root, rt, engine=engine, offline=ask.offline, prepare_argv=argv, root_flag=root_flag)
        pinned = run_image(rt, engine, launcher, ask.image)
        service = {"inference_id": ask.inference, "engine": engine, "launcher": launcher, "runtime": rt.runtime_id}
        return parse_request(RunRequest, {**service, "device": backend, "image": pinned, **run})
    if ask.model is None:
        raise HitchError("usage_error", "give --model local/ALIAS or --inference sha256:<id>", {})
    resolve_model(root, ask.model)  # the alias first: an unknown model fails before anything else is looked at
    profile: ProfileShort = ask.profile_or_default
    choice = resolve_choice(ask).require()
    rt = runtime_of(choice)
    argv = [ask.model, *choice.device_argv(), "--profile", profile, "--runtime", rt.name]
    if ask.generation is not None:
        argv += ["--generation", ask.generation.name]
    ensure_runtime(root, rt, engine=choice.engine, offline=ask.offline, prepare_argv=argv, root_flag=root_flag)
    image = run_image(rt, choice.engine, choice.launcher, ask.image)
    return run_request(choice, ask.model, profile, image, ask.generation, **run)


def end_run(
    client: DaemonClient, run_id: str, status: Literal["completed", "failed", "cancelled"], error: HitchError | None
) -> dict[str, Any] | None:
    """Tell the daemon how the run ended; the record it keeps. When the daemon is gone, the record on disk if
    it ended the run before going (a stop), else None (it died: its next start ends the run ``interrupted``)."""
    finish = FinishRunRequest(
        status=status, error=RunErrorIn(code=error.code, message=error.message) if error is not None else None
    )
    try:
        record = client.finish_run(run_id, finish)["record"]
    except HitchError as exc:
        if exc.code != "daemon_unavailable":
            raise
        kept = RunStore(client.root).read(run_id)
        return kept.to_json_dict() if kept is not None and kept.terminal else None
    return record if isinstance(record, dict) else None
