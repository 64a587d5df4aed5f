"""The one engine of a certification session, behind the gateway, shared by every test (and xdist worker).

:func:`open_session` imports the model (a model fixture, ``fixture:tiny`` or ``fixture:smollm2``, is built
once under ``$HITCH_ROOT/cache/fixtures`` and imported under the alias ``certify-<key>``), makes sure the
runtime is installed (on demand), starts the root's daemon if needed and
creates this process's run through it (``POST /v1/runs``: the daemon's single-flight acquire shares one
engine service between xdist workers; each worker gets its own run and token). :class:`CertifyEnv` is what
suites use: the run's gateway URL and token, the direct engine URL and key (for the perf suite's direct arm
and for the checks that must look behind the gateway), the fake engine's control API, and helpers to make
more runs. Teardown deletes the runs; the controller stops the service (and the daemon if it started it).

Session facts every process agrees on (inference id, runtime, model id and what the model is, service id) are
written to
``<report-dir>/session.json`` for the evaluator in the controlling process.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from catalog.model_fixtures import fixture_by_key
from certify.model_facts import model_facts
from certify.options import CertifyOptions
from certify.reference_set import prepare_references
from certify.secrets_scan import remember
from certify.timeline import span
from fixtures.checkpoint import tiny_checkpoint_cached
from fixtures.fake_sglang.client import FakeControl
from fixtures.images import built_image
from harness.app import progress
from harness.app.daemon_client import DaemonClient, ensure_daemon
from harness.app.locks import runtime_named
from harness.app.models import import_once, model_id_of
from harness.app.requests import RunRequest, parse_request
from harness.app.service import engine_endpoint, engine_start, ensure_runtime, run_image
from harness.contracts.binding import ModelEndpointBindingV1
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_json, ensure_private_dir, write_secret

__all__ = [
    "CertifyEnv",
    "FakeControl",
    "RunHandle",
    "SessionEnd",
    "create_run",
    "fixture_checkpoint",
    "open_session",
    "secrets_ledger",
    "session_key_dir",
]

FIXTURE_ALIAS_PREFIX = "certify-"


@dataclass(frozen=True)
class RunHandle:
    run_id: str
    binding_id: str
    service_id: str
    inference_id: str
    epoch: int
    base_url: str  # the gateway's OpenAI base URL for this run (ends in /v1)
    wire_model: str
    token: str = field(repr=False)
    binding: ModelEndpointBindingV1 | None = None  # the record the daemon issued (model-call checks against it)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class CertifyEnv:
    options: CertifyOptions
    root: HitchRoot
    daemon: DaemonClient
    model_ref: str
    model_id: str
    runtime_id: str
    run: RunHandle
    engine_url: str  # direct engine base URL (no /v1)
    engine_key: str = field(repr=False)
    fake: FakeControl | None
    body: dict[str, Any]  # the POST /v1/runs body (for new runs)
    runs: list[RunHandle] = field(default_factory=list)
    ledger: Path | None = None  # the session's secrets ledger (see certify.secrets_scan)

    @property
    def engine(self) -> str:
        return str(self.options.engine)

    @property
    def device(self) -> str:
        return self.options.device

    def engine_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.engine_key}"}

    def new_run(self, run_id: str | None = None) -> RunHandle:
        handle = create_run(self.daemon, {**self.body, "run_id": run_id or "certify-" + secrets.token_hex(6)})
        self.runs.append(handle)
        if self.ledger is not None:
            remember(self.ledger, f"run_token:{handle.run_id}", handle.token)
        return handle

    def delete_run(self, run: RunHandle) -> dict[str, Any]:
        return self.daemon.delete_run(run.run_id)

    def service(self) -> dict[str, Any] | None:
        for svc in self.daemon.services().get("services", []):
            if svc.get("service_id") == self.run.service_id:
                return dict(svc)
        return None

    def close(self) -> None:
        for run in reversed(self.runs):
            with contextlib.suppress(Exception):  # teardown goes on; the controller stops the service anyway
                self.delete_run(run)


def session_key_dir(opts: CertifyOptions, session_key: str) -> Path:
    """Private files shared by this session's processes (fake control token, ports)."""
    return ensure_private_dir(opts.root.certify / session_key)


def secrets_ledger(opts: CertifyOptions, session_key: str) -> Path:
    """Where the session's processes name the secrets they know, for the session-end scan (0600 files in a
    ``private`` folder: a ledger left behind by a crash is where secrets may be)."""
    return session_key_dir(opts, session_key) / "private" / "secrets"


@dataclass(frozen=True)
class SessionEnd:
    """What a session-end check sees (:func:`certify.registry.at_session_end`): the session's options, the
    facts its processes agreed on (``session.json``; empty when no session opened) and its secrets ledger."""

    options: CertifyOptions
    facts: dict[str, Any]
    ledger: Path

    @property
    def root(self) -> HitchRoot:
        return self.options.root


def fixture_checkpoint(ref: str, cache_dir: Path) -> Path:
    """Build the model fixture ``ref`` (``fixture:tiny``, ``fixture:smollm2``) once under ``cache_dir``."""
    key = fixture_by_key(ref).key  # an unknown fixture is a usage_error naming the known ones
    if key == "smollm2":
        # imported here: its GGUF reader (numpy, gguf) costs ~0.6 s, which a session on fixture:tiny never needs
        from fixtures.smollm2 import smollm2_cached

        return smollm2_cached(cache_dir)
    if key == "tiny":
        return tiny_checkpoint_cached(cache_dir)
    raise HitchError("usage_error", f"the model fixture {ref!r} has no builder in certify", {"fixture": ref})


def _ensure_model(opts: CertifyOptions) -> str:
    if opts.model.startswith("local/"):  # already in the store (--inference names it by its model_id)
        return opts.model
    if opts.model.startswith("fixture:"):
        src = fixture_checkpoint(opts.model, opts.root.fixture_cache)
        alias = FIXTURE_ALIAS_PREFIX + fixture_by_key(opts.model).key
    else:
        src, alias = Path(opts.model).expanduser(), "certify-" + Path(opts.model).name.lower()[:40].strip("-_.") or "model"
    return import_once(opts.root, src, alias)


def fake_engine_image(lock_dir: Path) -> str:
    """The fake engine image's ID (:mod:`fixtures.images.fake_engine`: idempotent, serialised by a file mutex in
    ``lock_dir``); ``inference_runtime_unavailable`` when it cannot be built (no Docker, no packages)."""
    return built_image("fake_engine", ensure_private_dir(lock_dir) / "fake-image.lock")


def eval_trial_image(lock_dir: Path) -> str:
    """The eval trial image's ID (:mod:`fixtures.images.trial`: the fake engine image plus the trial client;
    idempotent, under the same mutex)."""
    return built_image("trial", ensure_private_dir(lock_dir) / "fake-image.lock")


def _oci_image(opts: CertifyOptions, runtime: InferenceRuntimeManifestV1) -> str | None:
    """The pinned image an ``oci`` session runs: the runtime's (catalog digest or operator pin) for SGLang, the
    fake engine image for a contract run; None for a process session."""
    if opts.launcher != "oci":
        return None
    if opts.engine == "fake":
        return fake_engine_image(opts.root.certify)
    return run_image(runtime, "sglang", "oci", None)


def create_run(daemon: DaemonClient, body: dict[str, Any]) -> RunHandle:
    """``POST /v1/runs`` on ``daemon`` (the session's, or a private one) and the run's handle, token read; ``body``
    is checked as a :class:`~harness.app.requests.RunRequest` before it is sent."""
    run = daemon.create_run(parse_request(RunRequest, body))
    token = Path(run["token_file"]).read_text(encoding="utf-8").strip()
    return RunHandle(
        run_id=run["run_id"],
        binding_id=run["binding_id"],
        service_id=run["service_id"],
        inference_id=run["inference_id"],
        epoch=int(run["epoch"]),
        base_url=run["base_url"],
        wire_model=run["wire_model"],
        token=token,
        binding=ModelEndpointBindingV1.model_validate(run["binding"]),
    )


def open_session(opts: CertifyOptions, session_key: str, worker: str, *, references: bool = False) -> CertifyEnv:
    """Create this process's run on the session's shared engine (started by the first caller).

    ``references``: the session runs correctness checks on a real engine; their reference runs are computed (or
    found cached) first, while no engine spins a core (:func:`certify.reference_set.prepare_references`).
    """
    with span("model fixture and import"):
        model_ref = _ensure_model(opts)
    runtime = runtime_named(str(opts.runtime))  # choose_engine named it
    with span("runtime check/install"):
        ensure_runtime(opts.root, runtime, engine=opts.engine or "sglang")
    runtime_id = runtime.runtime_id
    model_id = model_id_of(opts.root, model_ref)
    prepared: dict[str, Any] | None = None
    if references and opts.engine == "sglang":
        with span("reference computation", engine="none"):
            prepared = prepare_references(opts.root, model_id)
    body: dict[str, Any] = {
        "model": model_ref,
        "device": opts.device,
        "profile": opts.profile,
        "runtime": runtime_id,
        "engine": opts.engine,
        "launcher": opts.launcher,
    }
    if opts.generation is not None:  # --generation: the drafted lock samples as the profile says
        body["generation"] = opts.generation.sampling.to_json_dict()
    if opts.inference is not None:  # the sealed lock as it is: nothing drafted, probed or sealed again
        body = {k: v for k, v in body.items() if k not in ("model", "profile")} | {"inference_id": opts.inference}
    with span("engine image check"):
        image = _oci_image(opts, runtime)
    if image is not None:
        body["image"] = image
    fake: FakeControl | None = None
    # the fake engine's control channel is a host file + loopback port: a container on its internal network
    # reaches neither, so an oci contract session runs without it (the checks that need it say so)
    if opts.engine == "fake" and opts.launcher != "oci":
        shared = session_key_dir(opts, session_key)
        token_file = shared / "fake-control.token"
        if not token_file.exists():
            with FileLock(str(shared / "token.lock")):
                if not token_file.exists():
                    write_secret(token_file, secrets.token_urlsafe(24))
        port_file = shared / "fake-control.port"
        faults = [arg for fault in opts.fake_faults for arg in ("--fault", fault)]
        body["fake_flags"] = FakeControl.launch_flags(port_file, token_file) + faults
        fake = FakeControl(port_file, token_file.read_text(encoding="utf-8").strip())
    with span("session daemon start/check"):
        daemon = ensure_daemon(opts.root)
    with span("session engine start (first process) or join", engine="session"):  # the daemon's single-flight acquire
        run_id = f"certify-{session_key[:8]}-{worker}"
        # the phases of a cold start on the terminal itself (pytest captures a fixture's own stderr)
        with progress.watch(opts.root, run_id, out=sys.__stderr__ or sys.stderr):
            run = create_run(daemon, {**body, "run_id": run_id})
    engine_url, engine_key = engine_endpoint(opts.root, run.service_id)
    ledger = secrets_ledger(opts, session_key)
    remember(ledger, "engine_key", engine_key)
    remember(ledger, f"run_token:{run.run_id}", run.token)
    env = CertifyEnv(
        opts, opts.root, daemon, model_ref, model_id, runtime_id, run, engine_url, engine_key, fake, body, [run], ledger
    )
    facts = {
        "engine": opts.engine,
        "launcher": opts.launcher,
        "device": opts.device,
        "profile": opts.profile,
        "runtime_id": runtime_id,
        "model_ref": model_ref,
        "model_id": model_id,
        "model": model_facts(opts.root, model_id, model_ref).to_json_dict(),
        "inference_id": run.inference_id,
        "service_id": run.service_id,
        "choice_reason": opts.choice_reason,
        "allow_uncertified": opts.allow_uncertified,
        "fake_faults": list(opts.fake_faults),
        "reference": prepared,
        "engine_start": engine_start(opts.root, run.service_id, run.epoch),
    }
    opts.report_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(opts.report_dir / "session.json", facts)
    return env
