"""The strict comparability conditions of spec §6.3, checked before any figure is compared.

Two runs (or two evaluations) are comparable only when they ran the same model (``model_id``), the same
inference identity (``inference_id``: runtime, profile, execution, sampling, protocol, resources), on the same
machine and device (:func:`harness.devices.fingerprint.machine_identity`: the hardware part of the fingerprint,
not its load or allocation) and under the same cache condition (``cold``: the service started for the run;
``warm``: it was reused). Otherwise :func:`require_comparable` refuses with ``runs_not_comparable`` naming every
condition that differs and both values; no figure is compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import HitchError

__all__ = ["STRICT_CONDITIONS", "Condition", "refuse_itself", "require_comparable"]

STRICT_CONDITIONS = ("model_id", "inference_id", "hardware", "cache_condition")


@dataclass(frozen=True)
class Condition:
    name: str
    a: Any
    b: Any

    @property
    def same(self) -> bool:
        return bool(self.a == self.b)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "a": self.a, "b": self.b, "same": self.same}


def require_comparable(kind: str, a: str, b: str, conditions: Sequence[Condition], *, across_models: bool = False) -> None:
    """Raise ``runs_not_comparable`` naming the conditions that differ (``kind``: run | evaluation); with
    ``across_models`` the conditions are every one but the model (:mod:`harness.compare.across_models`)."""
    differ = [c for c in conditions if not c.same]
    if differ:
        names = ", ".join(c.name for c in differ)
        how, only = (" across models", " (only the model may)") if across_models else ("", "")
        raise HitchError(
            "runs_not_comparable",
            f"{kind}s {a} and {b} are not comparable{how}: {names} differ{'s' if len(differ) == 1 else ''}{only}",
            {"a": a, "b": b, **({"across_models": True} if across_models else {}), "differ": [c.to_json() for c in differ],
             "conditions": [c.to_json() for c in conditions]},
        )  # fmt: skip


def refuse_itself(kind: str, a: str, b: str) -> None:
    """Raise ``comparison_with_itself`` when both sides are one measurement (``kind``: run | evaluation | entry)."""
    if a == b:
        raise HitchError(
            "comparison_with_itself",
            f"{kind} {a} compared with itself: one measurement decides nothing about reproducing it",
            {"a": a, "b": b},
        )
