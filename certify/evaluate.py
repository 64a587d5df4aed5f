"""The evaluator: the only place a certification level is decided (DESIGN §6).

``certified``   a real engine from a pinned, certifiable catalog runtime on a certifiable platform, every
                required check declared for this engine and device passed, and the release gate holds
                (:mod:`certify.gate`: a real-engine Codex loop of at least two tool round trips that changed a
                file, and Harbor trials on the real engine);
``provisional`` the same checks passed on a real engine, but the platform or runtime is not certifiable
                (a CPU without AMX, the generic-CPU runtime, an unpinned image) or the release gate does not
                hold (its reason says which item and why: not run, skipped, or the model cannot);
``contract``    every required check passed against the fake engine: the harness is proven, the hardware not;
``failed``      any required check failed, errored, was skipped, or did not run at all.

A check that ran and measured that its subject cannot do what it measures (the model made no tool round trip,
a random checkpoint never ends a turn, no request reached the engine) is ``not_applicable``, with the measured
reason in ``details.not_applicable`` (the plugin turns a check that recorded that reason into this status). It is
never a pass and never counts toward a level: a required one keeps a real engine's entry from ``certified``
(``provisional``, the reason names it) and is named in a contract entry's reasons; it fails nothing, because
the check did run and what it found is recorded.

A skipped or missing required check is never a pass; a check whose result is not ``passed`` but that is not
required only appears in the reasons.

Every row carries ``summary``: what a passed check showed, in one sentence (its declaration's
:meth:`~certify.registry.Check.summarize`), or why it did not pass. A real-engine evaluation that is not
``certified`` also says what would make it so here (``to_certify``: the doctor's, the runtime's and the
gate's reasons as actions, :func:`certify.gate.actions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from certify.gate import actions, gate_reasons
from certify.registry import Check

__all__ = ["CheckResult", "Evaluation", "Platform", "evaluate"]

Status = Literal["passed", "failed", "skipped", "not_run", "not_applicable"]
Level = Literal["certified", "provisional", "contract", "failed"]


@dataclass
class CheckResult:
    id: str
    status: Status
    duration_s: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def merge(self, other: CheckResult) -> CheckResult:
        """Two results for one id (a parametrized check, or xdist repeats): the worse status wins."""
        order = ("failed", "not_run", "skipped", "not_applicable", "passed")
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
    to_certify: list[str] = field(default_factory=list)


def evaluate(declared: dict[str, Check], results: dict[str, CheckResult], platform: Platform) -> Evaluation:
    reasons: list[str] = []
    rows: list[dict[str, Any]] = []
    not_shown: list[str] = []  # required checks not applicable: never toward a level
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
                rows.append(_row(result, spec, required=False))
            continue
        if result.status == "not_applicable":
            why = result.details.get("not_applicable") or result.details.get("reason") or "no reason recorded"
            reasons.append(f"{cid}: not applicable ({'required' if required else 'optional'}): {why}")
            if required:
                not_shown.append(cid)
        elif result.status != "passed":
            if required:
                failed = True
                reasons.append(f"{cid}: required check {result.status}")
            else:
                reasons.append(f"{cid}: optional check {result.status}")
        rows.append(_row(result, spec, required=required))
    if failed:
        return Evaluation("failed", reasons, rows)
    if platform.engine == "fake":
        return Evaluation("contract", [*reasons, "fake engine: proves the harness, claims nothing about hardware"], rows)
    gate = gate_reasons(declared, results, platform.engine, platform.device)
    unshown = [f"not certified while a required check is not applicable: {', '.join(not_shown)}"] if not_shown else []
    limits = [*platform.platform_reasons, *platform.runtime_reasons, *(reason for reason, _ in gate), *unshown]
    if platform.platform_certifiable and platform.runtime_certifiable and not gate and not unshown:
        return Evaluation("certified", reasons, rows)
    way = actions(list(platform.platform_reasons), list(platform.runtime_reasons), gate)
    if not_shown:
        way.append(f"certify a model that can show what {', '.join(not_shown)} measure(s)")
    return Evaluation("provisional", [*reasons, *limits] or ["platform or runtime not certifiable"], rows, way)


def _summary(result: CheckResult, spec: Check | None) -> str:
    """The row's sentence: what a pass showed, or why the check did not pass."""
    reason = str(result.details.get("reason") or "").strip().split("\n", 1)[0].removeprefix("E ").strip()
    reason = reason.removeprefix("Skipped: ")  # pytest's own prefix of a skip's reason
    reason = reason.removeprefix(f"{result.id} ")  # a skip's "<id> does not apply to ..."
    if result.status == "not_applicable":
        return f"not shown: {result.details.get('not_applicable') or reason or 'no reason recorded'}"
    if result.status == "passed":
        return spec.summarize(result.details) if spec is not None else ""
    if result.status == "not_run":
        return "did not run"
    return f"{result.status}: {reason}" if reason else result.status


def _row(result: CheckResult, spec: Check | None, *, required: bool) -> dict[str, Any]:
    return {
        "id": result.id,
        "status": result.status,
        "required": required,
        "duration_s": round(result.duration_s, 4),
        "summary": _summary(result, spec),
        "details": result.details,
    }
