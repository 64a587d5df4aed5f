"""What one pytest process of a certify session keeps (:class:`CertifyState`, in the config's stash) and the
facts the plugin's parts share about it: the resolved options (:func:`resolved_options`, the engine choice made
once per process) and which items are certification checks (:func:`is_certify_item`, :func:`check_id_of`).

Example::

    state = config.stash[STATE]  # set up by certify.plugin's pytest_configure
    opts = resolved_options(config)  # certify.options.choose_engine, once
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from certify.evaluate import CheckResult
from certify.options import CertifyOptions, choose_engine, options_from
from certify.timeline import CpuSample

__all__ = ["STATE", "SUITES_DIR", "CertifyState", "check_id_of", "is_certify_item", "resolved_options"]

SUITES_DIR = Path(__file__).resolve().parent / "suites"


@dataclass
class CertifyState:
    is_worker: bool
    session_key: str
    daemon_was_running: bool = True
    results: dict[str, CheckResult] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)  # <check>/<name> -> EvidenceFileV1 fields
    active: bool = False
    resolved: CertifyOptions | None = None
    summary: list[str] = field(default_factory=list)
    blocked: str | None = None  # why the session stopped before its suites (see certify.plugin._fail_closed)
    timing: bool = False  # this process runs certification checks: their fixtures are timed
    started_at: float = 0.0  # epoch seconds of the controller's session start
    cpu_first: CpuSample | None = None
    spans: list[dict[str, Any]] = field(default_factory=list)
    teardowns: dict[int, float] = field(default_factory=dict)  # id(fixturedef) -> its teardown's start
    refused: set[str] = field(default_factory=set)  # metric names of timings a quiet phase refused


STATE = pytest.StashKey[CertifyState]()


def is_certify_item(item: pytest.Item) -> bool:
    return SUITES_DIR in Path(str(item.path)).resolve().parents


def check_id_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("check")
    if marker is None:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    return str(marker.args[0]).format(**params)


def resolved_options(config: pytest.Config) -> CertifyOptions:
    state = config.stash[STATE]
    if state.resolved is None:
        state.resolved = choose_engine(options_from(config))
    return state.resolved
