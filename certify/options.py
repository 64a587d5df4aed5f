"""The certify plugin's options, parsed once into :class:`CertifyOptions`, and the engine choice.

The choice is the application layer's one rule (:mod:`harness.app.choice`): by default the best engine the
machine can run — an AMX CPU with Docker and a pinned image → the official image (oci); otherwise the
generic-CPU SGLang runtime, installed on demand; otherwise the fake engine. ``--engine`` / ``--launcher`` /
``--runtime`` override it.

``--inference sha256:...`` certifies a lock already sealed in this root, exactly (model, runtime, device,
profile, every execution value: nothing is drafted or probed again); ``--reproduces ENTRY`` names the signed
entry the session reproduces (its payload digest goes into the new entry); both are what ``hitch catalog
reproduce`` passes (:mod:`certify.reproduce`). ``--fake-fault SPEC`` starts the fake engine with that fault (the
deliberate changes a reproduction must find), and is refused for any other engine.

``--generation NAME|FILE`` drafts the session's lock with that generation profile's sampling (as ``hitch local
lock --generation``; greedy by default; not with ``--inference``, whose lock fixes its sampling); the checks that
need greedy decoding then record ``not_applicable`` saying so (:func:`certify.kit.correctness.greedy_only`).

``--device cuda`` fails closed (spec §8.1): on a machine whose GPUs the doctor refuses (no driver, no GPU, a
driver or GPU too old) the choice is *blocked* with the doctor's reason unless ``--engine fake`` asks for a
contract run; it never falls back to the fake engine or to a CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

import pytest

from harness.paths import HitchRoot
from harness.settings import env_name, settings

if TYPE_CHECKING:  # types only: the plugin is loaded by every pytest process, the contracts only by certify runs
    from harness.app.locks import GenerationProfile, ProfileShort
    from harness.contracts.service import EngineName, LauncherName

__all__ = ["REPORT_ENV", "SESSION_ENV", "CertifyOptions", "add_options", "choose_engine", "options_from"]

REPO = Path(__file__).resolve().parent.parent
REPORT_ENV = env_name("certify_report_dir")  # set by the controlling process so xdist workers agree on it
SESSION_ENV = env_name("certify_session")  # the session key shared by the controller and its workers


CertifyDevice = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class CertifyOptions:
    device: CertifyDevice  # auto until choose_engine resolves it
    engine: EngineName | None  # None: the best this machine runs (choose_engine)
    runtime: str | None  # catalog name or runtime_id; choose_engine names the runtime_id
    launcher: LauncherName | None
    model: str
    profile: ProfileShort
    sign_key: Path | None
    report_dir: Path
    canary: bool
    root: HitchRoot
    choice_reason: str = ""
    # the one permission to certify on a backend the doctor does not certify (the generic-CPU runtime): the
    # session then runs and its entry says so; without it such a session is blocked with the doctor's reasons
    allow_uncertified: bool = False
    # set when the requested device cannot run here at all (cuda without a usable GPU): the session stops
    # before any suite and records a failed entry saying why, instead of certifying something else
    blocked: str | None = None
    inference: str | None = None  # a lock sealed in this root, certified as it is (--inference)
    reproduces: Path | None = None  # the signed entry this session reproduces (--reproduces)
    fake_faults: tuple[str, ...] = ()  # --fake-fault: the fake engine's faults (fake engine only)
    quiet_load: str = "auto"  # --quiet-load: the quiet phase's limit on the machine's busy cores (certify.quiet)
    generation: GenerationProfile | None = None  # --generation: the drafted lock's sampling (None: greedy)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("certify", "Hitch certification (pytest certify)")
    group.addoption("--device", default="auto", choices=("cpu", "cuda", "auto"), help="backend to certify")
    group.addoption(
        "--allow-uncertified",
        action="store_true",
        default=False,
        help="allow a backend the doctor does not certify (generic-CPU runtime); recorded, never certified",
    )
    group.addoption("--engine", default=None, choices=("sglang", "fake"), help="engine (default: best available)")
    group.addoption("--runtime", default=None, help="catalog runtime name or runtime_id")
    group.addoption("--launcher", default=None, choices=("oci", "process"), help="how the engine runs")
    group.addoption("--model", default="fixture:tiny", help="PATH | local/ALIAS | fixture:tiny | fixture:smollm2")
    group.addoption("--profile", default="baseline", choices=("baseline", "throughput"), help="lock profile")
    group.addoption("--sign-key", default=None, help="Ed25519 private key (PEM); default: a dev key under HITCH_ROOT")
    group.addoption("--report-dir", default=None, help="where the signed entry and HTML pages go")
    group.addoption("--canary", action="store_true", default=False, help="compare with the last signed entry")
    group.addoption("--generation", default=None, help="NAME|FILE: the drafted lock's generation profile (default greedy)")
    group.addoption("--inference", default=None, help="certify this lock sealed in HITCH_ROOT as it is (sha256:<hex>)")
    group.addoption("--reproduces", default=None, help="the signed entry (*.dsse.json) this session reproduces")
    group.addoption("--fake-fault", action="append", default=[], help="--engine fake only: start the fake engine with this fault")
    group.addoption(
        "--quiet-load",
        default=None,
        help="most busy cores the machine may show around a timing (auto: max(0.5, cores/4); a number; off: "
        "read, not enforced); default HITCH_CERTIFY_QUIET_LOAD or auto",
    )


T = TypeVar("T", bound=str)


def _reports_base() -> Path:
    """Where ``reports/out/`` goes by default: the checkout, or, run from an installed package, the current folder."""
    return REPO if (REPO / "pyproject.toml").is_file() else Path.cwd()


def _one_of(config: pytest.Config, option: str, choices: tuple[T, ...]) -> T:
    value = config.getoption(option)
    for choice in choices:
        if value == choice:
            return choice
    raise pytest.UsageError(f"{option} is one of {', '.join(choices)}")


def options_from(config: pytest.Config) -> CertifyOptions:
    report = config.getoption("--report-dir") or settings().certify_report_dir
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    sign_key = config.getoption("--sign-key")
    reproduces = config.getoption("--reproduces")
    faults = tuple(config.getoption("--fake-fault") or ())
    if faults and config.getoption("--engine") != "fake":
        raise pytest.UsageError("--fake-fault is for --engine fake")
    opts = CertifyOptions(
        device=_one_of(config, "--device", ("auto", "cpu", "cuda")),
        engine=config.getoption("--engine"),  # pytest checked the choices
        runtime=config.getoption("--runtime"),
        launcher=config.getoption("--launcher"),
        model=str(config.getoption("--model")),
        profile=_one_of(config, "--profile", ("baseline", "throughput")),
        sign_key=Path(sign_key).expanduser() if sign_key else None,
        report_dir=Path(report).expanduser().resolve() if report else _reports_base() / "reports" / "out" / stamp,
        canary=bool(config.getoption("--canary")),
        allow_uncertified=bool(config.getoption("--allow-uncertified")),
        root=HitchRoot.at(),
        reproduces=Path(reproduces).expanduser().resolve() if reproduces else None,
        fake_faults=faults,
        quiet_load=_quiet_load(config),
        generation=_generation(config),
    )
    inference = config.getoption("--inference")
    if inference and opts.generation is not None:
        raise pytest.UsageError("--inference pins the lock's sampling; drop --generation")
    return _pinned(opts, str(inference)) if inference else opts


def _generation(config: pytest.Config) -> GenerationProfile | None:
    spec = config.getoption("--generation")
    if spec is None:
        return None
    from harness.app.locks import generation_profile
    from harness.errors import HitchError

    try:
        return generation_profile(str(spec))
    except HitchError as exc:
        raise pytest.UsageError(exc.message) from None


def _quiet_load(config: pytest.Config) -> str:
    from certify.quiet import parse_limit

    value = str(config.getoption("--quiet-load") or settings().certify_quiet_load or "auto")
    try:
        parse_limit(value, 1)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    return value


def _pinned(opts: CertifyOptions, inference: str) -> CertifyOptions:
    """``--inference``: the sealed lock decides the model, runtime, device and profile (a conflicting --device or
    --profile is refused rather than silently overridden)."""
    from harness.app.locks import sealed_lock
    from harness.errors import HitchError

    try:
        lock = sealed_lock(opts.root, inference)
    except HitchError as exc:
        raise pytest.UsageError(f"--inference {inference}: {exc.message}") from None
    backend = lock.execution.platform.backend
    if backend not in ("cpu", "cuda"):
        raise pytest.UsageError(f"--inference {inference} is a {backend} lock; certify runs cpu and cuda locks")
    device: Literal["cpu", "cuda"] = "cuda" if backend == "cuda" else "cpu"
    profile: Literal["baseline", "throughput"] = "throughput" if lock.profile == "evaluation-throughput-v1" else "baseline"
    if opts.device not in ("auto", device):
        raise pytest.UsageError(f"--inference {inference} is a {device} lock; drop --device {opts.device}")
    return replace(
        opts, inference=inference, device=device, profile=profile, runtime=lock.runtime_id, model=f"local/{lock.model_id}"
    )


def choose_engine(opts: CertifyOptions) -> CertifyOptions:
    """Resolve the device, engine, launcher and runtime by the one rule (:func:`harness.app.choice.resolve_choice`;
    reads the machine, starts nothing). A choice the rule refuses is recorded as ``blocked``, with the runtime it
    would have run: the session then stops before its suites and writes a failed entry saying why."""
    # imported here: this module is loaded by every pytest process (the plugin), the resolver only by certify runs
    from harness.app.choice import resolve_choice
    from harness.app.spec import ServiceSpec

    choice = resolve_choice(ServiceSpec.model_validate(opts, from_attributes=True))
    return replace(
        opts,
        device=choice.device,
        engine=choice.engine,
        launcher=choice.launcher,
        runtime=choice.runtime_id,
        choice_reason=choice.basis,
        blocked=choice.refusal.message if choice.refusal is not None else None,
    )
