"""The certify pytest plugin (entry point ``pytest11``). Suites arrive with the certification issue."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("certify", "Hitch certification")
    group.addoption(
        "--device",
        action="store",
        default="auto",
        choices=("cpu", "cuda", "auto"),
        help="backend to certify",
    )
