"""The certify plugin's options, parsed once into :class:`CertifyOptions`, and the default engine choice.

Defaults pick the best engine the machine can run (issue 6, item 1): an AMX CPU with Docker and a pinned
image → the official image (oci); otherwise the generic-CPU SGLang runtime, installed on demand; otherwise
the fake engine. ``--engine`` / ``--launcher`` / ``--runtime`` override the choice.

``--device cuda`` fails closed (spec §8.1): on a machine whose GPUs the doctor refuses (no driver, no GPU, a
driver or GPU too old) the choice is *blocked* with the doctor's reason unless ``--engine fake`` asks for a
contract run; it never falls back to the fake engine or to a CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from harness.paths import HitchRoot
from harness.settings import env_name, settings

__all__ = ["REPORT_ENV", "SESSION_ENV", "CertifyOptions", "add_options", "choose_engine", "options_from"]

REPO = Path(__file__).resolve().parent.parent
REPORT_ENV = env_name("certify_report_dir")  # set by the controlling process so xdist workers agree on it
SESSION_ENV = env_name("certify_session")  # the session key shared by the controller and its workers


@dataclass(frozen=True)
class CertifyOptions:
    device: str  # cpu | cuda | auto (resolved in choose_engine)
    engine: str | None
    runtime: str | None
    launcher: str | None
    model: str
    profile: str
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


def options_from(config: pytest.Config) -> CertifyOptions:
    report = config.getoption("--report-dir") or settings().certify_report_dir
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    sign_key = config.getoption("--sign-key")
    return CertifyOptions(
        device=str(config.getoption("--device")),
        engine=config.getoption("--engine"),
        runtime=config.getoption("--runtime"),
        launcher=config.getoption("--launcher"),
        model=str(config.getoption("--model")),
        profile=str(config.getoption("--profile")),
        sign_key=Path(sign_key).expanduser() if sign_key else None,
        report_dir=Path(report).expanduser().resolve() if report else REPO / "reports" / "out" / stamp,
        canary=bool(config.getoption("--canary")),
        allow_uncertified=bool(config.getoption("--allow-uncertified")),
        root=HitchRoot.at(),
    )


def choose_engine(opts: CertifyOptions) -> CertifyOptions:
    """Resolve ``auto`` device and the default engine/launcher/runtime (reads the machine; starts nothing)."""
    from harness.devices import gpu_reasons, run_doctor

    doctor = run_doctor(opts.device if opts.device in ("cpu", "cuda") else "auto")  # type: ignore[arg-type]
    device = opts.device if opts.device != "auto" else (doctor.selected or "cpu")
    chosen = _choose(opts, device, doctor)
    problems = gpu_reasons(doctor.cuda) if device == "cuda" else []
    if opts.device == "cuda" and opts.engine != "fake" and (problems or chosen.engine == "fake"):
        why = problems[0] if problems else "no CUDA SGLang runtime in the catalog"
        return replace(
            chosen,
            engine="sglang",
            launcher=chosen.launcher if chosen.engine != "fake" else "process",
            runtime=chosen.runtime or _any_runtime(device),
            blocked=f"--device cuda cannot run on this machine: {why}",
            choice_reason="fail closed: no usable GPU (no fake engine, no CPU fallback)",
        )
    return _require_certified(chosen, doctor)


def _require_certified(chosen: CertifyOptions, doctor: Any) -> CertifyOptions:
    """An SGLang session on a backend the doctor does not certify runs only with ``--allow-uncertified``."""
    from harness.devices.choice import ALLOW_FLAG
    from harness.runtimes import default_runtime, get_runtime

    if chosen.engine != "sglang":
        return chosen
    verdict = doctor.devices.get(chosen.device)
    runtime = get_runtime(chosen.runtime) if chosen.runtime else default_runtime(chosen.device, launcher=chosen.launcher)
    why = list(verdict.reasons if verdict is not None and not verdict.certifiable else [])
    if not runtime.certifiable:
        why.append(f"runtime {runtime.name} is not certifiable")
    if not why:
        return chosen
    if chosen.allow_uncertified:
        return replace(chosen, choice_reason=f"{chosen.choice_reason}; uncertified backend allowed ({ALLOW_FLAG})")
    return replace(
        chosen,
        blocked=f"no certified backend for --device {chosen.device} here ({'; '.join(why)}); "
        f"pass {ALLOW_FLAG} to run the {runtime.name} runtime (recorded, never certified)",
        choice_reason="fail closed: an uncertified backend needs explicit permission",
    )


def _any_runtime(device: str) -> str | None:
    """The catalog runtime a blocked session names (its entry needs an identity): certifiable ones first."""
    from harness.runtimes import load_catalog

    runtimes = sorted((r for r in load_catalog() if r.backend == device), key=lambda r: not r.certifiable)
    return runtimes[0].runtime_id if runtimes else None


def _choose(opts: CertifyOptions, device: str, doctor: Any) -> CertifyOptions:
    from harness.runtimes import load_catalog

    if opts.engine is not None:
        engine, launcher = opts.engine, opts.launcher or "process"
        return replace(opts, device=device, engine=engine, launcher=launcher, choice_reason="given on the command line")
    catalog = [r for r in load_catalog() if r.backend == device]
    verdict = doctor.devices.get(device)
    docker_ok = bool(doctor.docker.reachable)
    pinned_oci = [r for r in catalog if r.package.kind == "oci" and r.pinned and r.certifiable]
    if verdict is not None and verdict.certifiable and docker_ok and pinned_oci and opts.launcher in (None, "oci"):
        rt = opts.runtime or pinned_oci[0].runtime_id
        return replace(
            opts,
            device=device,
            engine="sglang",
            launcher="oci",
            runtime=rt,
            choice_reason="certifiable platform, Docker, pinned image",
        )
    envs = [r for r in catalog if r.package.kind == "python-env"]
    if envs:
        rt = opts.runtime or envs[0].runtime_id
        return replace(
            opts, device=device, engine="sglang", launcher="process", runtime=rt,
            choice_reason=f"no certifiable platform+image here; the {envs[0].name} runtime (installed on demand)",
        )  # fmt: skip
    return replace(
        opts, device=device, engine="fake", launcher="process", choice_reason="no runnable SGLang runtime: fake engine"
    )
