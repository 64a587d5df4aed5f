"""Which device, engine, launcher and runtime a service runs on: resolved once, by one rule (spec §5, §8.1).

Every entry point asks :func:`resolve_choice` with its :class:`~harness.app.spec.ServiceSpec` (the CLI's options,
the certify plugin's options, ``hitch run``'s ask); nothing else decides a device, an engine or a launcher. The rule, in order:

1. **Device.** ``auto`` takes the device the doctor selects (certifiable CUDA, else certifiable CPU) or, with a
   runtime given, that runtime's device. When none is certifiable: a usable GPU (CUDA), else the CPU — both
   uncertified. ``cpu`` and ``cuda`` take that device; ``metal`` and any other name are
   ``inference_device_unsupported``.
2. **Engine and launcher**, when no engine is given: on a certifiable device with Docker and a pinned,
   certifiable image, SGLang in a container (``oci``); else, with ``oci`` asked for, the device's pinned image;
   else a python-env runtime of the device, installed on demand (``process``); else, on the CPU, the fake engine
   (a contract run). An engine given without a launcher runs as a process.
3. **Runtime**, when not given: the catalog's best for the device and launcher (certifiable and pinned first).
4. **Certified** when the device is certifiable here, the runtime is certifiable and the engine is SGLang.
5. **Refused** (:attr:`Choice.refusal`; :meth:`Choice.require` raises it): SGLang on CUDA without a usable GPU or
   without a CUDA runtime — never a fallback to the CPU or to the fake engine, not even with
   ``allow_uncertified`` (``inference_device_unsupported``); SGLang on an uncertified backend without
   ``allow_uncertified`` (``inference_backend_uncertified``). The fake engine is a contract instrument: it needs
   no permission and is never certified. A sealed lock records what was allowed
   (``execution.backend_certification``), so it is never chosen again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from harness.app.requests import DeviceChoiceV1
from harness.app.spec import ServiceSpec
from harness.contracts.base import Record
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.contracts.service import EngineName, LauncherName
from harness.devices import DoctorReportV1, gpu_reasons, run_doctor
from harness.errors import HitchError
from harness.lock import ServedDevice, served_device
from harness.runtimes import default_runtime, get_runtime, load_catalog

__all__ = ["ALLOW_FLAG", "DEVICE_CHOICES", "Choice", "RefusalV1", "resolve_choice"]

DEVICE_CHOICES = ("auto", "cpu", "cuda")
ALLOW_FLAG = "--allow-uncertified"


class RefusalV1(Record):
    """Why the choice cannot run here, as the error the CLI raises and the certify session records."""

    code: Literal["inference_device_unsupported", "inference_backend_uncertified"]
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class Choice(Record):
    """The resolved device, engine, launcher and runtime, and why."""

    requested: str
    device: ServedDevice
    engine: EngineName
    launcher: LauncherName
    runtime_id: str | None = Field(description="null only when the catalog has no runtime for the device")
    runtime_name: str | None
    certified: bool
    allow_uncertified: bool
    reasons: list[str] = Field(description="why this device, and why it is not certified")
    basis: str = Field(description="why this engine and launcher")
    refusal: RefusalV1 | None = None

    def require(self) -> Choice:
        """This choice, or its refusal raised."""
        if self.refusal is not None:
            raise HitchError(self.refusal.code, self.refusal.message, dict(self.refusal.details))
        if self.runtime_id is None:
            raise HitchError("inference_runtime_not_found", f"the runtime catalog has no {self.device} runtime", {})
        return self

    def device_choice(self) -> DeviceChoiceV1:
        """The device part, as a prepare or run request records it."""
        return DeviceChoiceV1(
            requested=self.requested,
            device=self.device,
            certified=self.certified,
            allow_uncertified=self.allow_uncertified,
            reasons=self.reasons,
        )

    def device_argv(self) -> list[str]:
        """The flags that repeat this device choice in a printed command."""
        return ["--device", self.device] + ([ALLOW_FLAG] if self.allow_uncertified else [])


def _device(requested: str, report: DoctorReportV1, given: InferenceRuntimeManifestV1 | None) -> ServedDevice:
    if requested != "auto":
        return served_device(requested)
    if given is not None:
        return served_device(given.backend)
    if report.selected is not None:
        return report.selected
    return "cuda" if not gpu_reasons(report.cuda) else "cpu"  # uncertified from here on: a usable GPU first


def _why(report: DoctorReportV1, device: ServedDevice) -> str:
    verdict = report.devices.get(device)
    reasons = verdict.reasons if verdict is not None else ["not examined"]
    return f"{device}: {'; '.join(reasons) or 'not certifiable'}"


def _certifiable(report: DoctorReportV1, device: ServedDevice) -> bool:
    verdict = report.devices.get(device)
    return verdict is not None and verdict.certifiable


def _engine(
    req: ServiceSpec,
    device: ServedDevice,
    report: DoctorReportV1,
    runtimes: Sequence[InferenceRuntimeManifestV1],
    given: InferenceRuntimeManifestV1 | None,
) -> tuple[EngineName, LauncherName, InferenceRuntimeManifestV1 | None, str]:
    """Rule 2: engine, launcher, the runtime the step picked (if it picked one) and why."""
    if req.engine is not None:
        return req.engine, req.launcher or "process", given, "given on the command line"
    mine = [r for r in runtimes if r.backend == device]
    images = [r for r in mine if r.package.kind == "oci" and r.pinned and r.certifiable]
    if _certifiable(report, device) and report.docker.reachable and images and req.launcher in (None, "oci"):
        return "sglang", "oci", given or images[0], "certifiable platform, Docker, pinned image"
    if req.launcher == "oci":
        pinned = [r for r in mine if r.package.kind == "oci" and r.package.digest is not None]
        if pinned:
            return "sglang", "oci", given or pinned[0], f"the {pinned[0].name} image (--launcher oci)"
        return "sglang", "oci", given, "--launcher oci (no pinned image of the device: refused when it starts)"
    envs = [r for r in mine if r.package.kind == "python-env"]
    if envs:
        why = f"no certifiable platform+image here; the {envs[0].name} runtime (installed on demand)"
        return "sglang", "process", given or envs[0], why
    if device == "cuda":  # never the fake engine for a CUDA session: rule 5 refuses it instead
        return "sglang", "process", given, "no CUDA SGLang runtime in the catalog"
    return "fake", "process", given, "no runnable SGLang runtime: fake engine"


def _runtime(
    device: ServedDevice, engine: EngineName, launcher: LauncherName, runtimes: Sequence[InferenceRuntimeManifestV1]
) -> InferenceRuntimeManifestV1 | None:
    """Rule 3 (the fake engine runs no runtime artifact: its lock names the device's default whatever the launcher)."""
    mine = [r for r in runtimes if r.backend == device]
    if not mine:
        return None
    return default_runtime(device, launcher=launcher if engine == "sglang" else None, runtimes=mine)


def resolve_choice(
    req: ServiceSpec,
    *,
    doctor: DoctorReportV1 | None = None,
    catalog: Sequence[InferenceRuntimeManifestV1] | None = None,
) -> Choice:
    """Resolve ``req`` against the doctor's report (default: this machine's, ``run_doctor("auto")``) and the
    runtime catalog (default: the shipped one with this root's operator pins). Reads the machine; starts nothing."""
    if req.device != "auto":
        served_device(req.device)  # metal and unknown names first, before any probe
    report = doctor if doctor is not None else run_doctor("auto")
    runtimes = list(catalog) if catalog is not None else load_catalog()
    given = get_runtime(req.runtime, runtimes=runtimes) if req.runtime else None
    device = _device(req.device, report, given)
    engine, launcher, picked, basis = _engine(req, device, report, runtimes, given)
    runtime = picked or _runtime(device, engine, launcher, runtimes)
    runtime_ok = runtime is not None and runtime.certifiable
    certified = engine == "sglang" and _certifiable(report, device) and runtime_ok
    considered: list[ServedDevice] = ["cuda", "cpu"] if req.device == "auto" and given is None else [device]
    why = [_why(report, d) for d in considered]
    if runtime is not None and not runtime.certifiable:
        why.append(f"runtime {runtime.name} is not certifiable")
    refusal: RefusalV1 | None = None
    if engine == "fake":
        reasons = ["fake engine: a contract run, never certified", *why]
    elif certified:
        reasons = [f"{device} is certifiable on this machine"]
    elif req.allow_uncertified:
        reasons = [f"{device} is not certified here; {ALLOW_FLAG} given", *why]
        basis = f"{basis}; uncertified backend allowed ({ALLOW_FLAG})"
    else:
        reasons = why
    gpu = gpu_reasons(report.cuda) if device == "cuda" else []
    if engine == "sglang" and device == "cuda" and (gpu or runtime is None):
        cause = gpu[0] if gpu else "no CUDA SGLang runtime in the catalog"
        basis = "fail closed: no usable GPU (no fake engine, no CPU fallback)"
        refusal = RefusalV1(
            code="inference_device_unsupported",
            message=f"--device cuda cannot run on this machine: {cause}",
            details={"requested": req.device, "reasons": gpu or [cause]},
        )
    elif engine == "sglang" and not certified and not req.allow_uncertified:
        name = runtime.name if runtime is not None else f"generic {device}"
        basis = "fail closed: an uncertified backend needs explicit permission"
        refusal = RefusalV1(
            code="inference_backend_uncertified",
            message=f"no certified backend for --device {req.device} on this machine ({' | '.join(why)}); "
            f"pass {ALLOW_FLAG} to run the {name} runtime (recorded in the lock, never certified)",
            details={"requested": req.device, "reasons": why, "allow_with": ALLOW_FLAG, "fallback": device},
        )
    return Choice(
        requested=req.device,
        device=device,
        engine=engine,
        launcher=launcher,
        runtime_id=runtime.runtime_id if runtime is not None else None,
        runtime_name=runtime.name if runtime is not None else None,
        certified=certified,
        allow_uncertified=req.allow_uncertified,
        reasons=reasons,
        basis=basis,
        refusal=refusal,
    )
