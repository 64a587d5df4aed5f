"""BundleManifestV1: ``bundle.json``, the first member of a ``hitch bundle export`` tar (spec §6.4).

A bundle carries a run's, an evaluation's or a signed entry's manifests, lock, evidence and digests so it can be
checked on a machine that has none of it (``hitch bundle verify``, offline). It never carries model weights,
a runtime, payload captures or secrets: what a machine needs to *run* the same thing again (the checkpoint and
the runtime's archive) travels beside it, by digest (README: migration without a network).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.contracts.base import Record, Sha256
from harness.contracts.run_ref import RelativePath

__all__ = ["BUNDLE_MANIFEST", "BundleFileV1", "BundleKind", "BundleManifestV1"]

BUNDLE_MANIFEST = "bundle.json"
BundleKind = Literal["run", "evaluation", "entry"]


class BundleFileV1(Record):
    path: RelativePath
    size: int = Field(ge=0)
    digest: Sha256


class BundleManifestV1(Record):
    schema_version: Literal["1"] = "1"
    kind: BundleKind
    subject: str = Field(description="the run id, evaluation id or entry file name")
    created_at: float
    model_id: Sha256 | None = Field(default=None, description="the checkpoint to bring beside the bundle (by digest)")
    runtime_id: Sha256 | None = Field(default=None, description="the runtime to bring beside the bundle (by digest)")
    files: list[BundleFileV1] = Field(description="every other member, sorted by path")

    @model_validator(mode="after")
    def _sorted_unique(self) -> BundleManifestV1:
        paths = [f.path for f in self.files]
        if paths != sorted(set(paths)) or BUNDLE_MANIFEST in paths:
            raise ValueError("files are sorted by path, each once, and never bundle.json itself")
        return self
