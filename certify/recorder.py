"""What a certification check records about itself: metrics, details, evidence, and what it could not measure.

:class:`Recorder` is the ``certify_record`` fixture of a test check; :class:`EndRecorder` the same for a
session-end check. Both say when the subject cannot do what the check measures: :meth:`~Recorder.not_applicable`
(the measured reason) or :meth:`~Recorder.measured` with a count of 0 (no tool round trip, no sample, no request
that reached the engine). :func:`shown_status` then turns the check's ``passed`` into ``not_applicable``: no
check passes on nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

__all__ = ["EndRecorder", "Recorder", "shown_status"]


def shown_status(status: str, details: dict[str, Any]) -> str:
    """``not_applicable`` for a check that passed while recording ``details.not_applicable``; else ``status``."""
    if status == "passed" and details.get("not_applicable"):
        return "not_applicable"
    return status


class _Measures:
    """``not_applicable`` and ``measured``, on top of a recorder's ``detail``."""

    _measured: dict[str, int]

    def detail(self, key: str, value: Any) -> None:
        raise NotImplementedError

    def not_applicable(self, reason: str) -> None:
        """The subject cannot do what this check measures (the measured reason): the check records
        ``not_applicable``, never ``passed``, whatever else it asserts."""
        self.detail("not_applicable", reason)

    def measured(self, what: str, count: int) -> None:
        """How many of what this check measures it saw: ``details.measured[what]``; 0 makes the check
        ``not_applicable`` (it measured nothing)."""
        self._measured[what] = count
        self.detail("measured", dict(self._measured))
        if count == 0:
            self.not_applicable(f"0 {what}: nothing of what this check measures")


@dataclass
class Recorder(_Measures):
    item: pytest.Item
    _measured: dict[str, int] = field(default_factory=dict)

    def metric(self, name: str, value: Any) -> None:
        self.item.user_properties.append(("certify_metric", {name: value}))

    def detail(self, key: str, value: Any) -> None:
        self.item.user_properties.append(("certify_detail", {key: value}))

    def evidence(self, name: str, data: bytes) -> str:
        """Keep ``data`` in the run's evidence store and name it ``<check id>/<name>`` in the entry."""
        from catalog.evidence import EVIDENCE_DIR, store_blob
        from certify.state import check_id_of, resolved_options

        cid = check_id_of(self.item)
        if cid is None:
            raise RuntimeError(f"{self.item.nodeid}: evidence recorded outside a certification check")
        digest = store_blob(resolved_options(self.item.config).report_dir / EVIDENCE_DIR, data)
        entry = {"name": f"{cid}/{name}", "check": cid, "digest": digest, "size": len(data)}
        self.item.user_properties.append(("certify_evidence", {entry["name"]: entry}))
        return digest


@dataclass
class EndRecorder(_Measures):
    """What a session-end check records (its details and metrics), as :class:`Recorder` does for a test."""

    details: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    _measured: dict[str, int] = field(default_factory=dict)

    def metric(self, name: str, value: Any) -> None:
        self.metrics[name] = value

    def detail(self, key: str, value: Any) -> None:
        self.details[key] = value
