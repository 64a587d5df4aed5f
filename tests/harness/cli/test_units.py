"""Human units of human output: decimal sizes, durations in s/min/h, ISO-8601 UTC instants."""

from __future__ import annotations

import pytest

from harness.cli import units


@pytest.mark.parametrize(
    ("n", "shown"),
    [(None, "-"), (0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (821_480, "821.5 kB"), (272_588_680, "272.6 MB")],
)
def test_size(n: int | None, shown: str) -> None:
    assert units.size(n) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (0.4213, "0.42 s"), (12.34, "12.3 s"), (245, "4 min 05 s"), (7380, "2 h 03 min")],
)
def test_duration(seconds: float | None, shown: str) -> None:
    assert units.duration(seconds) == shown


def test_size_of_gigabytes() -> None:
    assert units.size(3_494_903_808) == "3.5 GB"


def test_iso_utc() -> None:
    assert units.iso_utc(1796662608.6) == "2026-12-07T16:56:48Z" and units.iso_utc(None) == "-"
