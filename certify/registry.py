"""Check declarations: every certification check has a stable id, a suite, and where it applies.

A suite module (``certify/suites/test_<suite>.py``) declares its checks in a module-level ``CHECKS`` list
of :class:`Check` and marks each test with ``@pytest.mark.check("<id>")`` (``{param}`` placeholders are
filled from the test's parametrization). The evaluator reads the declarations, not what happened to run:
a required check that is declared for this engine and device but has no passing result is a failure.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field

__all__ = ["SUITES", "Check", "all_checks", "applicable"]

SUITES = ("hardware", "protocol", "correctness", "faults", "security", "lifecycle", "perf", "agents")


@dataclass(frozen=True)
class Check:
    id: str
    required: bool = True
    engines: frozenset[str] = field(default_factory=lambda: frozenset({"sglang", "fake"}))
    devices: frozenset[str] = field(default_factory=lambda: frozenset({"cpu", "cuda"}))
    description: str = ""

    def __post_init__(self) -> None:
        suite = self.id.split(".", 1)[0]
        if suite not in SUITES or "." not in self.id:
            raise ValueError(f"check id {self.id!r} must start with one of {SUITES} and a dot")

    @property
    def suite(self) -> str:
        return self.id.split(".", 1)[0]

    def applies(self, engine: str, device: str) -> bool:
        return engine in self.engines and device in self.devices


def check(
    check_id: str,
    *,
    required: bool = True,
    engines: tuple[str, ...] = ("sglang", "fake"),
    devices: tuple[str, ...] = ("cpu", "cuda"),
    description: str = "",
) -> Check:
    return Check(check_id, required, frozenset(engines), frozenset(devices), description)


def all_checks() -> dict[str, Check]:
    """Every check declared by the suite modules under ``certify/suites`` (imported by name)."""
    import certify.suites as suites

    out: dict[str, Check] = {}
    for info in pkgutil.iter_modules(suites.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"certify.suites.{info.name}")
        for item in getattr(module, "CHECKS", []):
            if not isinstance(item, Check):
                raise TypeError(f"certify.suites.{info.name}.CHECKS holds {item!r}, not a Check")
            if item.id in out:
                raise ValueError(f"check id {item.id!r} is declared twice")
            out[item.id] = item
    return out


def applicable(checks: dict[str, Check], engine: str, device: str) -> dict[str, Check]:
    return {cid: c for cid, c in checks.items() if c.applies(engine, device)}
