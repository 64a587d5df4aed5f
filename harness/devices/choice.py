"""Which backend a service runs on (spec §5, §8.1): ``--device auto|cpu|cuda`` resolved once, at preflight.

``auto`` takes certified CUDA, else certified CPU, else refuses with the doctor's reasons. A backend the
doctor does not certify (on a machine without AMX and a pinned image: the generic-CPU runtime) runs only
with the one explicit permission, ``allow_uncertified``; the lock then records it
(``execution.backend_certification``), so a sealed lock is never re-chosen and never mistaken for a
certified one. The fake engine is a contract instrument, not a backend: it needs no permission.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from harness.devices.doctor import gpu_reasons
from harness.devices.report import DeviceName, DoctorReportV1
from harness.errors import HitchError

__all__ = ["ALLOW_FLAG", "DEVICE_CHOICES", "DeviceChoice", "choose_device"]

DEVICE_CHOICES = ("auto", "cpu", "cuda")
ALLOW_FLAG = "--allow-uncertified"


@dataclass(frozen=True)
class DeviceChoice:
    """The resolved device and why; ``certified`` is False for an allowed uncertified backend or a fake engine."""

    requested: str
    device: DeviceName
    certified: bool
    allow_uncertified: bool
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _why(report: DoctorReportV1, device: DeviceName) -> str:
    verdict = report.devices.get(device)
    reasons = verdict.reasons if verdict is not None else ["not examined"]
    return f"{device}: {'; '.join(reasons) or 'not certifiable'}"


def choose_device(
    requested: str,
    report: DoctorReportV1,
    *,
    engine: str,
    allow_uncertified: bool,
    runtime_certifiable: bool | None = None,
) -> DeviceChoice:
    """Resolve ``requested`` against the doctor's ``report`` (made with ``run_doctor("auto")``).

    ``runtime_certifiable`` (when the runtime is already known, e.g. ``--runtime``) must also hold for the
    choice to count as certified: a certifiable machine running an uncertified runtime is uncertified.
    """
    if requested not in DEVICE_CHOICES:
        raise HitchError(
            "inference_device_unsupported", f"device {requested!r} is not served in P0", {"choices": list(DEVICE_CHOICES)}
        )
    order: list[DeviceName] = ["cuda", "cpu"] if requested == "auto" else ["cuda" if requested == "cuda" else "cpu"]
    for device in order:
        verdict = report.devices.get(device)
        if verdict is not None and verdict.certifiable and runtime_certifiable is not False:
            return DeviceChoice(requested, device, True, allow_uncertified, [f"{device} is certifiable on this machine"])
    why = [_why(report, device) for device in order]
    if runtime_certifiable is False:
        why.append("the runtime chosen is not certifiable")
    # Uncertified from here on: a usable GPU is still preferred for auto, else the CPU.
    fallback: DeviceName = order[0] if requested != "auto" else ("cuda" if not gpu_reasons(report.cuda) else "cpu")
    if engine == "fake":
        return DeviceChoice(requested, fallback, False, allow_uncertified, ["fake engine: a contract run, never certified", *why])
    if allow_uncertified:
        return DeviceChoice(requested, fallback, False, True, [f"{fallback} is not certified here; {ALLOW_FLAG} given", *why])
    raise HitchError(
        "inference_backend_uncertified",
        f"no certified backend for --device {requested} on this machine ({' | '.join(why)}); "
        f"pass {ALLOW_FLAG} to run the generic {fallback} runtime (recorded in the lock, never certified)",
        {"requested": requested, "reasons": why, "allow_with": ALLOW_FLAG, "fallback": fallback},
    )
