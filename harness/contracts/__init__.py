"""Pydantic v2 records for everything that crosses a process or disk boundary (DESIGN §3).

One module per family; every record is strict (``extra="forbid"``) and frozen.
``SCHEMA_RECORDS`` lists what is exported to ``docs/schemas/``.
"""

from __future__ import annotations

from harness.contracts.agent_profile import HarnessCompatibilityProfileV1
from harness.contracts.base import Record, Sha256, parse_record
from harness.contracts.binding import ModelEndpointBindingV1
from harness.contracts.bundle import BundleManifestV1
from harness.contracts.certification import CertificationCheckV1, CertificationResultV1, EvidenceIndexV1
from harness.contracts.evaluation import EvaluationPlanV1, EvaluationRecordV1
from harness.contracts.events import LifecycleEventV1, RequestEvidenceV1
from harness.contracts.evidence import HardwareFingerprintV1, InferenceExecutionEvidenceV1
from harness.contracts.lock import InferenceLockV1, compute_inference_id
from harness.contracts.model import LocalModelManifestV1, compute_model_id
from harness.contracts.model_fixture import ModelFixtureProvenanceV1
from harness.contracts.run import RunRecordV1
from harness.contracts.run_ref import CaptureIndexV1, InferenceRefV1
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.contracts.service import InferenceServiceRecordV1
from harness.contracts.timeline import CertificationTimelineV1

__all__ = [
    "SCHEMA_RECORDS",
    "BundleManifestV1",
    "CaptureIndexV1",
    "CertificationCheckV1",
    "CertificationResultV1",
    "CertificationTimelineV1",
    "EvaluationPlanV1",
    "EvaluationRecordV1",
    "EvidenceIndexV1",
    "HardwareFingerprintV1",
    "HarnessCompatibilityProfileV1",
    "InferenceExecutionEvidenceV1",
    "InferenceLockV1",
    "InferenceRefV1",
    "InferenceRuntimeManifestV1",
    "InferenceServiceRecordV1",
    "LifecycleEventV1",
    "LocalModelManifestV1",
    "ModelEndpointBindingV1",
    "ModelFixtureProvenanceV1",
    "Record",
    "RequestEvidenceV1",
    "RunRecordV1",
    "Sha256",
    "compute_inference_id",
    "compute_model_id",
    "parse_record",
]

SCHEMA_RECORDS: tuple[type[Record], ...] = (
    LocalModelManifestV1,
    InferenceRuntimeManifestV1,
    InferenceLockV1,
    InferenceServiceRecordV1,
    InferenceExecutionEvidenceV1,
    ModelEndpointBindingV1,
    LifecycleEventV1,
    RequestEvidenceV1,
    CertificationResultV1,
    EvidenceIndexV1,
    HarnessCompatibilityProfileV1,
    RunRecordV1,
    ModelFixtureProvenanceV1,
    EvaluationRecordV1,
    InferenceRefV1,
    CaptureIndexV1,
    BundleManifestV1,
    EvaluationPlanV1,
    CertificationTimelineV1,
)
