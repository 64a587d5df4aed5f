"""The gates a certify check passes before it runs, under pytest-xdist: the session engine's turn
(:func:`engine_turn`, shared or alone among the session's processes) and the machine's (:func:`quiet_turn`, a
quiet phase: the machine alone for a timing). Outside xdist both are no-ops but the quiet phase's readings.

Which fixtures take which turn is said here once: :data:`PRIVATE_FIXTURES` hand a check a private daemon (no
session engine turn), :data:`OWN_TURN_FIXTURES` take their turns themselves (their setup must not hold the engine
shared meanwhile: another worker waiting on their mutex would hold it too), and a module or session fixture of a
test that uses the session engine holds it shared while it is set up (:func:`setup_holds_engine`; the plugin's
``pytest_fixture_setup`` records it in :data:`FIXTURE_HOLD`).

Example::

    with engine_turn(request.config, exclusive=True):  # a fault on the shared engine, no other worker's request
        ...
    with quiet_turn(request.config, "perf overhead") as phase:  # TimingRefused when the machine was loaded
        ...
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from certify.quiet import QuietLimit, QuietPhase, held_turn, parse_limit, quiet_phase
from certify.state import STATE, is_certify_item, resolved_options

__all__ = [
    "FIXTURE_HOLD",
    "OWN_TURN_FIXTURES",
    "PRIVATE_FIXTURES",
    "engine_turn",
    "quiet_limit",
    "quiet_turn",
    "setup_holds_engine",
    "turn_dir",
    "uses_session",
]

PRIVATE_FIXTURES = ("private_daemon",)  # fixtures that hand a check a private daemon and its engine
# fixtures that take the session engine's turn (or a quiet phase) themselves, behind a file mutex of their own:
# their setup must not hold the engine shared meanwhile (another worker waiting on that mutex would hold it too)
OWN_TURN_FIXTURES = ("overhead", "inside", "cancel")
FIXTURE_HOLD: list[str] = []  # the fixture whose setup holds the engine's turn in this process (the plugin's hook)


def setup_holds_engine(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> bool:
    """Whether this fixture's setup holds the session engine shared: a module or session fixture (set up before
    the test's own turn, below, is taken), for a certify test that uses the session engine, unless it hands out a
    private daemon or takes its turns itself."""
    if fixturedef.scope == "function" or fixturedef.argname in (*PRIVATE_FIXTURES, *OWN_TURN_FIXTURES):
        return False
    item = getattr(request, "_pyfuncitem", None)
    return isinstance(item, pytest.Item) and is_certify_item(item) and uses_session(item)


def uses_session(item: pytest.Item) -> bool:
    """A private daemon's checks reach the session's engine only when they ask for the session itself."""
    names = set(getattr(item, "fixturenames", ()))
    asked = set(getattr(getattr(item, "_fixtureinfo", None), "argnames", ()))  # the test's own arguments
    return "certify_env" in asked or not names & set(PRIVATE_FIXTURES)


def turn_dir(config: pytest.Config) -> Path | None:
    """Where the session's processes take turns (its key folder), or None outside xdist."""
    if not hasattr(config, "workerinput"):
        return None
    from certify.session import session_key_dir

    return session_key_dir(resolved_options(config), config.stash[STATE].session_key)


@contextlib.contextmanager
def engine_turn(config: pytest.Config, *, exclusive: bool) -> Iterator[None]:
    """Under xdist, hold the session engine shared or alone among the session's processes; a no-op otherwise.

    Every certify test holds it shared while it runs (the plugin's autouse fixture) unless it uses only a private
    engine; a test marked ``exclusive_engine``, or a fixture that measures or changes the shared engine, holds it
    alone: a fault set on the shared fake engine, its request log, or a latency measurement is never disturbed by
    another worker's check. A module or session fixture of a test that uses the session engine holds it shared
    while it is set up (the plugin's ``pytest_fixture_setup``: its requests reach that engine too), unless it is
    one of :data:`OWN_TURN_FIXTURES`, which take their turns themselves. Taken after the machine's turn
    (:func:`quiet_turn`), never before it.
    """
    if FIXTURE_HOLD:
        raise RuntimeError(
            f"fixture {FIXTURE_HOLD[-1]} takes the engine's turn itself while its setup holds it shared: "
            "name it in certify.turns.OWN_TURN_FIXTURES"
        )
    with held_turn(turn_dir(config), "engine", exclusive=exclusive):
        yield


def quiet_limit(config: pytest.Config) -> QuietLimit:
    return parse_limit(resolved_options(config).quiet_load, os.cpu_count() or 1)


@contextlib.contextmanager
def quiet_turn(config: pytest.Config, name: str) -> Iterator[QuietPhase]:
    """A fixture's timing as a quiet phase (:func:`certify.quiet.quiet_phase`): the machine alone, settled
    before, read after; :class:`~certify.quiet.TimingRefused` when it was loaded."""
    if FIXTURE_HOLD:
        raise RuntimeError(
            f"fixture {FIXTURE_HOLD[-1]} asks for the machine alone while its setup holds the engine shared: "
            "name it in certify.turns.OWN_TURN_FIXTURES"
        )
    with quiet_phase(name, quiet_limit(config), turn_dir(config)) as phase:
        yield phase
