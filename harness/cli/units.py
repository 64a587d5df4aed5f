"""Human units for human output (JSON keeps the numbers): sizes in kB/MB/GB, durations in s/min/h, instants as
ISO-8601 UTC."""

from __future__ import annotations

import datetime as dt

__all__ = ["duration", "iso_utc", "size"]

_SIZE_UNITS = ("kB", "MB", "GB", "TB")


def size(n: int | float | None) -> str:
    """Bytes in decimal units: ``821 B``, ``272.6 MB``."""
    if n is None:
        return "-"
    value = float(n)
    if abs(value) < 1000:
        return f"{int(value)} B"
    for unit in _SIZE_UNITS:
        value /= 1000
        if abs(value) < 1000 or unit == _SIZE_UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def duration(seconds: float | None) -> str:
    """``0.42 s``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def iso_utc(epoch: float | None) -> str:
    """An epoch instant as ``2026-12-07T16:56:49Z`` (seconds)."""
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
