"""The certify plugin's options, parsed once into :class:`CertifyOptions`, and the default engine choice.

Defaults pick the best engine the machine can run (issue 6, item 1): an AMX CPU with Docker and a pinned
image → the official image (oci); otherwise the generic-CPU SGLang runtime, installed on demand; otherwise
the fake engine. ``--engine`` / ``--launcher`` / ``--runtime`` override the choice.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from harness.paths import HitchRoot

__all__ = ["REPORT_ENV", "SESSION_ENV", "CertifyOptions", "add_options", "choose_engine", "options_from"]

REPO = Path(__file__).resolve().parent.parent
REPORT_ENV = "HITCH_CERTIFY_REPORT_DIR"  # set by the controlling process so xdist workers agree on it
SESSION_ENV = "HITCH_CERTIFY_SESSION"  # the session key shared by the controller and its workers


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


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("certify", "Hitch certification (pytest certify)")
    group.addoption("--device", default="auto", choices=("cpu", "cuda", "auto"), help="backend to certify")
    group.addoption("--engine", default=None, choices=("sglang", "fake"), help="engine (default: best available)")
    group.addoption("--runtime", default=None, help="catalog runtime name or runtime_id")
    group.addoption("--launcher", default=None, choices=("oci", "process"), help="how the engine runs")
    group.addoption("--model", default="fixture:tiny", help="PATH | local/ALIAS | fixture:tiny")
    group.addoption("--profile", default="baseline", choices=("baseline", "throughput"), help="lock profile")
    group.addoption("--sign-key", default=None, help="Ed25519 private key (PEM); default: a dev key under HITCH_ROOT")
    group.addoption("--report-dir", default=None, help="where the signed entry and HTML pages go")
    group.addoption("--canary", action="store_true", default=False, help="compare with the last signed entry")


def options_from(config: pytest.Config) -> CertifyOptions:
    report = config.getoption("--report-dir") or os.environ.get(REPORT_ENV)
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
        root=HitchRoot.at(os.environ.get("HITCH_ROOT")),
    )


def choose_engine(opts: CertifyOptions) -> CertifyOptions:
    """Resolve ``auto`` device and the default engine/launcher/runtime (reads the machine; starts nothing)."""
    from harness.devices import run_doctor
    from harness.runtimes import load_catalog

    doctor = run_doctor(opts.device if opts.device in ("cpu", "cuda") else "auto")  # type: ignore[arg-type]
    device = opts.device if opts.device != "auto" else (doctor.selected or "cpu")
    if opts.engine is not None:
        engine, launcher = opts.engine, opts.launcher or "process"
        return replace(opts, device=device, engine=engine, launcher=launcher, choice_reason="given on the command line")
    catalog = [r for r in load_catalog() if r.backend == device]
    verdict = doctor.devices.get(device)  # type: ignore[call-overload]
    docker_ok = bool(doctor.docker.reachable) if hasattr(doctor.docker, "reachable") else False
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
