"""Check declarations: every certification check has a stable id, a suite, and where it applies.

A suite module (``certify/suites/test_<suite>.py``) declares each check on the test that implements it:
``@check("<id>", required=..., engines=..., devices=..., description=...)`` registers the :class:`Check` and
marks the test with ``pytest.mark.check("<id>")`` (``{param}`` placeholders are filled from the test's
parametrization; ``params=`` names their values). The evaluator reads the declarations, not what happened to run:
a required check that is declared for this engine and device but has no passing result is a failure.

``summary=`` says what a passing check showed, in one sentence a person reads on the run page: a
``str.format`` template over the check's details (``"{refused} requests refused with {code}"``; ``{a[b]}``
reaches into a nested detail) or a function of the details for anything a template cannot say. A template
that does not fit the details it is given falls back to the description (:meth:`Check.summarize`).

A check that must look at what every other check left behind (the secrets scan) is declared the same way on a
plain function marked :func:`at_session_end` instead of a test: pytest does not collect it; the plugin runs it
once, in the controlling process, after every test of the session (:func:`session_end_checks`).
"""

from __future__ import annotations

import importlib
import itertools
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import pytest

import certify.suites as suites

__all__ = ["SUITES", "Check", "Summary", "all_checks", "applicable", "at_session_end", "session_end_checks"]

F = TypeVar("F", bound=Callable[..., Any])
_DECLARED = "__certify_checks__"
_AT_SESSION_END = "__certify_session_end__"
SUITES = ("hardware", "protocol", "correctness", "faults", "security", "lifecycle", "perf", "agents")
# what a passing check showed: a str.format template over its details, or a function of them
Summary = str | Callable[[Mapping[str, Any]], str] | None


@dataclass(frozen=True)
class Check:
    id: str
    required: bool = True
    engines: frozenset[str] = field(default_factory=lambda: frozenset({"sglang", "fake"}))
    devices: frozenset[str] = field(default_factory=lambda: frozenset({"cpu", "cuda"}))
    description: str = ""
    # why the check leaves out an engine or device it does not apply to (shown in the skip and the entry)
    reason: str = ""
    summary: Summary = field(default=None, compare=False)

    def __post_init__(self) -> None:
        suite = self.id.split(".", 1)[0]
        if suite not in SUITES or "." not in self.id:
            raise ValueError(f"check id {self.id!r} must start with one of {SUITES} and a dot")

    @property
    def suite(self) -> str:
        return self.id.split(".", 1)[0]

    def applies(self, engine: str, device: str) -> bool:
        return engine in self.engines and device in self.devices

    def summarize(self, details: Mapping[str, Any]) -> str:
        """What this check showed when it passed with ``details``, in one sentence (see the module doc)."""
        if self.summary is not None:
            try:
                text = self.summary(details) if callable(self.summary) else self.summary.format_map(details)
            except Exception:  # details of another shape (a partial record): the description says it, never a crash
                text = ""
            if text.strip():
                return " ".join(text.split())
        return self.description


def check(
    check_id: str,
    *,
    required: bool = True,
    engines: tuple[str, ...] = ("sglang", "fake"),
    devices: tuple[str, ...] = ("cpu", "cuda"),
    description: str = "",
    params: Mapping[str, Sequence[str]] | None = None,
    reason: str = "",
    summary: Summary = None,
) -> Callable[[F], F]:
    """Declare the certification check a test implements and mark the test with its id, in one place.

    ``check_id`` may hold ``{param}`` placeholders for a parametrized test; ``params`` then lists the values
    that make up the declared ids (``faults.inband_error.{api}`` with ``params={"api": ("chat", "responses")}``
    declares both ids). The plugin fills the placeholders of each collected item from its parametrization.
    ``reason`` says why the check leaves out an engine or device (a fault no real engine can be made to show);
    the skip on that engine or device carries it into the entry. ``summary`` says what a pass showed (module doc).
    """
    keys = sorted(params or {})
    combos = itertools.product(*((params or {})[k] for k in keys))
    values = [dict(zip(keys, combo, strict=True)) for combo in combos]
    specs = [
        Check(check_id.format(**v), required, frozenset(engines), frozenset(devices), description.format(**v), reason, summary)
        for v in values
    ]

    def declare(fn: F) -> F:
        declared: list[Check] = [*getattr(fn, _DECLARED, ()), *specs]
        setattr(fn, _DECLARED, declared)
        marked: F = pytest.mark.check(check_id)(fn)
        return marked

    return declare


def declared_in(module: object) -> list[Check]:
    """The checks the tests of one suite module declare (through :func:`check`)."""
    out: list[Check] = []
    for value in vars(module).values():
        out.extend(getattr(value, _DECLARED, ()))
    return out


def at_session_end(fn: F) -> F:
    """Run the check ``fn`` (declared with :func:`check`) at session end instead of as a test; it is called
    as ``fn(end, record)`` with the session's :class:`~certify.session.SessionEnd` and a recorder."""
    setattr(fn, _AT_SESSION_END, True)
    return fn


def _suite_modules() -> list[ModuleType]:
    modules = []
    for info in pkgutil.iter_modules(suites.__path__):
        if info.name.startswith("test_"):
            modules.append(importlib.import_module(f"certify.suites.{info.name}"))
    return modules


def session_end_checks() -> list[tuple[Check, Callable[..., Any]]]:
    """(check, function) of every check marked :func:`at_session_end`, in declaration order."""
    out: list[tuple[Check, Callable[..., Any]]] = []
    for module in _suite_modules():
        for value in vars(module).values():
            if getattr(value, _AT_SESSION_END, False):
                out.extend((spec, value) for spec in getattr(value, _DECLARED, ()))
    return out


def all_checks() -> dict[str, Check]:
    """Every check declared by the suite modules under ``certify/suites`` (imported by name)."""
    out: dict[str, Check] = {}
    for module in _suite_modules():
        if hasattr(module, "CHECKS"):
            raise TypeError(f"{module.__name__}: declare checks with @check on the test, not in CHECKS")
        for item in declared_in(module):
            if item.id in out:
                raise ValueError(f"check id {item.id!r} is declared twice")
            out[item.id] = item
    return out


def applicable(checks: dict[str, Check], engine: str, device: str) -> dict[str, Check]:
    return {cid: c for cid, c in checks.items() if c.applies(engine, device)}
