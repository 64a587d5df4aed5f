"""Prepare a service: its runtime installed on demand (or refused offline), the image an ``oci`` service runs,
and the requests that name it to the daemon (prepare, run).

A command names its service as a :class:`~harness.app.spec.ServiceSpec` (``local prepare``, ``local serve``);
:func:`prepare_service` runs
``hitch local prepare`` through the daemon and :func:`serve_request` is the run ``hitch local serve`` opens.

:func:`ensure_runtime` is the one install-on-demand rule (``hitch local prepare``, ``hitch run``, ``hitch eval``,
the certify session): an SGLang python-env runtime is installed when missing, an OCI runtime pulled by its pinned
digest (an operator's pin is checked to be in the local engine); the fake engine needs nothing. ``offline``
never installs or pulls: what is missing fails at once with ``inference_runtime_unavailable`` and the exact
commands to run first.
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from harness.app import progress
from harness.app.choice import Choice, resolve_choice
from harness.app.daemon_client import ensure_daemon
from harness.app.requests import PrepareRequest, RunRequest, parse_request
from harness.app.spec import ServiceSpec
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.contracts.service import EngineName, LauncherName
from harness.errors import HitchError
from harness.launch.oci_config import require_pinned_image
from harness.lock import GenerationProfile, ProfileShort
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, install_runtime, installed_runtime, pinned_image
from harness.runtimes.pins import inspect_image
from harness.service.state_store import ServiceStateStore

__all__ = [
    "engine_endpoint",
    "engine_start",
    "ensure_runtime",
    "prepare_request",
    "prepare_service",
    "run_image",
    "run_request",
    "runtime_of",
    "serve_request",
]


def _model(spec: ServiceSpec) -> str:
    if spec.model is None:
        raise HitchError("usage_error", "give the model: local/ALIAS or local/sha256:<hex>", {})
    return spec.model


def runtime_of(choice: Choice) -> InferenceRuntimeManifestV1:
    """The runtime a (required) choice names."""
    return get_runtime(str(choice.require().runtime_id))


def _commands(runtime: InferenceRuntimeManifestV1, root_flag: Path | None, prepare_argv: Sequence[str]) -> list[str]:
    root = f" --root {shlex.quote(str(root_flag))}" if root_flag is not None else ""
    install = "hitch runtime install"
    if runtime.package.kind == "oci" and runtime.package.digest is None:  # install refuses a tag: pin a local image
        install = "hitch runtime pin"
    return [f"{install} {runtime.name}{root}", "hitch local prepare " + " ".join(shlex.quote(a) for a in prepare_argv) + root]


def _offline_image_missing(runtime: InferenceRuntimeManifestV1) -> str | None:
    """Why an OCI runtime cannot start offline (never pulls), or None when its pinned image is in Docker."""
    pkg = runtime.package
    if pkg.kind != "oci" or pkg.digest is None:
        return "it has no pinned digest"
    try:
        inspect_image(pkg.reference())
    except HitchError as err:
        return err.message
    return None


def _offline_refusal(
    runtime: InferenceRuntimeManifestV1, root_flag: Path | None, prepare_argv: Sequence[str], why: str
) -> NoReturn:
    commands = _commands(runtime, root_flag, prepare_argv)
    raise HitchError(
        "inference_runtime_unavailable",
        f"runtime {runtime.name} cannot run offline ({why}) and --offline forbids installing or pulling it; run first:\n  "
        + "\n  ".join(commands),
        {"runtime": runtime.name, "runtime_id": runtime.runtime_id, "run_first": commands, "why": why},
    )


def ensure_runtime(
    root: HitchRoot,
    runtime: InferenceRuntimeManifestV1,
    *,
    engine: EngineName,
    offline: bool = False,
    prepare_argv: Sequence[str] = (),
    root_flag: Path | None = None,
) -> None:
    """Make ``runtime`` ready to start for ``engine`` (progress on stderr). Offline, refuse what is missing and
    name the commands to run first: ``prepare_argv`` repeats the service, ``root_flag`` the ``--root`` given."""
    if engine != "sglang":
        return  # the fake engine runs no runtime artifact
    if runtime.package.kind != "python-env":
        if not offline:
            install_runtime(root, runtime)  # pulls the pinned digest; an operator's pin is checked to be there
            return
        missing = _offline_image_missing(runtime)
        if missing is None:
            return
        _offline_refusal(runtime, root_flag, prepare_argv, missing)
    if installed_runtime(root, runtime) is not None:
        return
    if offline:
        _offline_refusal(runtime, root_flag, prepare_argv, "it is not installed")
    install_runtime(root, runtime)


def run_image(runtime: InferenceRuntimeManifestV1, engine: EngineName, launcher: LauncherName, image: str | None) -> str | None:
    """The pinned image an ``oci`` service runs (None for ``process``): ``image`` (by digest or image ID, never a
    tag), else the runtime's pinned image (catalog digest or operator pin); the fake engine has no catalog image,
    so it needs one given (``python -m fixtures.images.fake_engine`` prints its IMAGE_ID)."""
    if launcher != "oci":
        if image is not None:
            raise HitchError("usage_error", "--image is for --launcher oci", {"image": image})
        return None
    if image is not None:
        return require_pinned_image(image)
    if engine == "fake":
        raise HitchError("usage_error", "--engine fake --launcher oci needs --image (the fake engine image's ID)", {})
    return pinned_image(runtime)


def _service(
    choice: Choice, model: str, profile: ProfileShort, image: str | None, generation: GenerationProfile | None
) -> dict[str, Any]:
    chosen = choice.require()
    return {
        "generation": generation.sampling if generation is not None else None,
        "model": model,
        "device": chosen.device,
        "device_choice": chosen.device_choice(),
        "profile": profile,
        "runtime": chosen.runtime_id,
        "engine": chosen.engine,
        "launcher": chosen.launcher,
        "image": image,
    }


def prepare_request(
    choice: Choice,
    model: str,
    profile: ProfileShort,
    image: str | None,
    context_tokens: int | None = None,
    generation: GenerationProfile | None = None,
) -> PrepareRequest:
    """``hitch local prepare``'s request for the service ``choice`` names."""
    return PrepareRequest(**_service(choice, model, profile, image, generation), context_tokens=context_tokens)


def run_request(
    choice: Choice, model: str, profile: ProfileShort, image: str | None, generation: GenerationProfile | None, **run: Any
) -> RunRequest:
    """A run's request for the service ``choice`` names (``run``: run_id, harness, capture, ...)."""
    return parse_request(RunRequest, {**_service(choice, model, profile, image, generation), **run})


def prepare_service(
    root: HitchRoot,
    ask: ServiceSpec,
    *,
    context_tokens: int | None = None,
    offline: bool = False,
    root_flag: Path | None = None,
    as_json: bool = False,
) -> tuple[Choice, dict[str, Any]]:
    """``hitch local prepare``: the choice, the runtime made ready (or refused offline), then the daemon (started on
    demand) starts the service once, probes it, seals and saves its lock; returns the choice and its answer."""
    model = _model(ask)
    choice = resolve_choice(ask).require()
    rt = runtime_of(choice)
    argv = [model, *choice.device_argv(), "--profile", ask.profile_or_default, "--runtime", rt.name]
    if ask.engine not in (None, "sglang"):
        argv += ["--engine", str(ask.engine)]
    if ask.launcher not in (None, "process"):
        argv += ["--launcher", str(ask.launcher)]
    if ask.generation is not None:
        argv += ["--generation", ask.generation.name]
    # first: --offline names the pin/prepare commands before an unpinned image is refused
    ensure_runtime(root, rt, engine=choice.engine, offline=offline, prepare_argv=argv, root_flag=root_flag)
    image = run_image(rt, choice.engine, choice.launcher, ask.image)
    request = prepare_request(choice, model, ask.profile_or_default, image, context_tokens, ask.generation)
    key = "prepare-" + secrets.token_hex(8)
    request = request.model_copy(update={"progress_key": key})
    client = ensure_daemon(root)
    with progress.watch(root, key, as_json=as_json):  # the phases on stderr while the daemon starts and verifies
        return choice, client.prepare(request)


def serve_request(ask: ServiceSpec, **run: Any) -> RunRequest:
    """The run ``hitch local serve`` opens for ``ask`` (``run``: run_id, capture, for_containers, eval_image)."""
    model = _model(ask)
    choice = resolve_choice(ask).require()
    image = run_image(runtime_of(choice), choice.engine, choice.launcher, ask.image)
    return run_request(choice, model, ask.profile_or_default, image, ask.generation, **run)


def engine_endpoint(root: HitchRoot, service_id: str) -> tuple[str, str]:
    """(direct engine base URL, engine key) of a running service, from its endpoint record: for the checks that
    must look behind the gateway, never for a run."""
    record = ServiceStateStore(root, service_id).read()
    if record is None or record.endpoint_ref is None:
        raise HitchError("inference_process_exited", f"service {service_id} has no endpoint record", {"service_id": service_id})
    ref = json.loads(Path(record.endpoint_ref).read_text())
    key = Path(ref["api_key_file"]).read_text(encoding="utf-8").strip()
    return str(ref["base_url"]), key


_START_FIELDS = ("ready_s", "engine_health_s", "engine_idle_wait_s", "engine_busy_polls", "flush_attempts")


def engine_start(root: HitchRoot, service_id: str, epoch: int) -> dict[str, Any] | None:
    """How a service's engine became ready in ``epoch`` (its ``inference.ready`` event): seconds to ready, to the
    engine's own health, waiting for the engine to go idle before the cache flush, and the flushes it took."""
    events = ServiceStateStore(root, service_id).events()
    ready = [e for e in events if e.event == "inference.ready" and e.epoch == epoch]
    return {k: ready[-1].details.get(k) for k in _START_FIELDS} if ready else None
