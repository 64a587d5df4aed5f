"""A component a check or a test needs that a machine may lack (Docker, Harbor, Codex, real SGLang).

One rule for all of them: a missing component skips with the reason, unless ``HITCH_REQUIRE_<COMPONENT>``
is set (``.ci/run`` sets them all), which turns the skip into a failure — never a silent skip of something
the caller is meant to run. The certify suites and the repository's tests both use it (tests/components.py).
"""

from __future__ import annotations

from typing import NoReturn

import pytest

from harness.settings import Component, env_name, settings

__all__ = ["missing"]


def missing(component: Component, reason: str) -> NoReturn:
    """Skip for ``reason``; fail instead when ``HITCH_REQUIRE_<COMPONENT>`` is set to anything but 0."""
    if settings().requires(component):
        pytest.fail(f"{env_name(f'require_{component}')} is set but {reason}", pytrace=False)
    pytest.skip(reason)
