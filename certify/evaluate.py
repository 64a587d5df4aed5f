"""The evaluator: the only place a certification level is decided (DESIGN §6).

``certified``   a real engine from a pinned, certifiable catalog runtime on a certifiable platform, and every
                required check declared for this engine and device passed;
``provisional`` the same checks passed on a real engine, but the platform or runtime is not certifiable
                (a CPU without AMX, the generic-CPU runtime, an unpinned image);
``contract``    every required check passed against the fake engine: the harness is proven, the hardware not;
``failed``      any required check failed, errored, was skipped, or did not run at all.

A check that ran and found its behaviour not applicable to the model (declared by the model-fixture catalog,
e.g. a random checkpoint never ends a turn) passes with ``details.not_applicable``; the reasons name it, so the
entry says what was not shown instead of hiding it.

A skipped or missing required check is never a pass; a check whose result is not ``passed`` but that is not
required only appears in the reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from certify.registry import Check

__all__ = ["CheckResult", "Evaluation", "Platform", "evaluate"]

Status = Literal["passed", "failed", "skipped", "not_run"]
Level = Literal["certified", "provisional", "contract", "failed"]


@dataclass
class CheckResult:
    id: str
    status: Status
    duration_s: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def merge(self, other: CheckResult) -> CheckResult:
        """Two results for one id (a parametrized check, or xdist repeats): the worse status wins."""
        order = ("failed", "not_run", "skipped", "passed")
        worse = self.status if order.index(self.status) <= order.index(other.status) else other.status
        return CheckResult(self.id, worse, self.duration_s + other.duration_s, {**other.details, **self.details})


@dataclass(frozen=True)
class Platform:
    engine: str  # sglang | fake
    device: str  # cpu | cuda
    platform_certifiable: bool
    platform_reasons: tuple[str, ...]
    runtime_certifiable: bool
    runtime_reasons: tuple[str, ...]
    session_error: str | None = None  # the engine never became usable


@dataclass(frozen=True)
class Evaluation:
    level: Level
    reasons: list[str]
    checks: list[dict[str, Any]]


def evaluate(declared: dict[str, Check], results: dict[str, CheckResult], platform: Platform) -> Evaluation:
    reasons: list[str] = []
    rows: list[dict[str, Any]] = []
    failed = False
    if platform.session_error:
        failed = True
        reasons.append(f"the engine session failed: {platform.session_error}")
    for cid in sorted(set(declared) | set(results)):
        spec = declared.get(cid)
        result = results.get(cid, CheckResult(cid, "not_run"))
        applies = spec is not None and spec.applies(platform.engine, platform.device)
        required = bool(spec is not None and spec.required and applies)
        if spec is None:
            failed = True
            reasons.append(f"{cid}: reported but not declared in any suite")
        elif not applies:
            if result.status != "not_run":
                rows.append(_row(result, required=False))
            continue
        if result.status != "passed":
            if required:
                failed = True
                reasons.append(f"{cid}: required check {result.status}")
            else:
                reasons.append(f"{cid}: optional check {result.status}")
        elif result.details.get("not_applicable"):
            reasons.append(f"{cid}: not applicable to this model: {result.details['not_applicable']}")
        rows.append(_row(result, required=required))
    if failed:
        return Evaluation("failed", reasons, rows)
    if platform.engine == "fake":
        return Evaluation("contract", [*reasons, "fake engine: proves the harness, claims nothing about hardware"], rows)
    limits = [*platform.platform_reasons, *platform.runtime_reasons]
    if platform.platform_certifiable and platform.runtime_certifiable:
        return Evaluation("certified", reasons, rows)
    return Evaluation("provisional", [*reasons, *limits] or ["platform or runtime not certifiable"], rows)


def _row(result: CheckResult, *, required: bool) -> dict[str, Any]:
    return {
        "id": result.id,
        "status": result.status,
        "required": required,
        "duration_s": round(result.duration_s, 4),
        "details": result.details,
    }
