"""InferenceRefV1 and CaptureIndexV1: the sealed set of one run's inference evidence (spec §6.3, §6.4).

``runs/<run-id>/inference.ref.json`` links, each by the sha256 of its bytes as written, the lock the run used, the
model and runtime manifests, the execution evidence, the gateway's attempt ledger, the engine's own figures of each
attempt (joined by request id) and the capture index. It is written once, when the run's evidence is complete, and
never rewritten; its own digest goes into ``run.json`` (``RunRecordV1.ref_digest``), so whoever holds ``run.json``
can tell whether the ref, and through it every file it names, is still what the daemon wrote (``hitch run verify``,
:mod:`harness.run_ref`).

``inference/capture-index.json`` lists the payload capture files of the run (path, size, sha256) without their
bytes: a bundle carries the index, never the payloads.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from harness.contracts.base import Record, Sha256

__all__ = [
    "REF_FILE_NAMES",
    "CaptureFileV1",
    "CaptureIndexV1",
    "InferenceRefV1",
    "RefFileName",
    "RefFileV1",
    "RelativePath",
]

RefFileName = Literal["lock", "model_manifest", "runtime_manifest", "execution", "attempts", "engine_requests", "capture_index"]
REF_FILE_NAMES: tuple[str, ...] = (
    "lock",
    "model_manifest",
    "runtime_manifest",
    "execution",
    "attempts",
    "engine_requests",
    "capture_index",
)


def _relative(path: str) -> str:
    """A plain relative path: no root, no ``.``/``..`` segment, no empty segment."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{path!r} is not a plain relative path")
    return path


RelativePath = Annotated[str, Field(pattern=r"^[A-Za-z0-9._/-]+$"), AfterValidator(_relative)]


class RefFileV1(Record):
    name: RefFileName
    path: RelativePath = Field(description="relative to runs/<run-id>/")
    digest: Sha256 = Field(description="sha256 of the file's bytes as written")
    size: int = Field(ge=0)


class InferenceRefV1(Record):
    schema_version: Literal["1"] = "1"
    run_id: str
    inference_id: Sha256
    lock_digest: Sha256 = Field(description="sha256 of the lock's canonical JSON (the execution evidence's lock_digest)")
    model_id: Sha256
    runtime_id: Sha256
    files: list[RefFileV1] = Field(description="one per name of REF_FILE_NAMES, in that order")
    sealed_at: float

    @model_validator(mode="after")
    def _every_file_once(self) -> InferenceRefV1:
        if tuple(f.name for f in self.files) != REF_FILE_NAMES:
            raise ValueError(f"files name {list(REF_FILE_NAMES)}, each once and in that order")
        return self

    def file(self, name: str) -> RefFileV1:
        return next(f for f in self.files if f.name == name)


class CaptureFileV1(Record):
    path: RelativePath = Field(description="relative to the run's capture folder")
    size: int = Field(ge=0)
    digest: Sha256


class CaptureIndexV1(Record):
    schema_version: Literal["1"] = "1"
    mode: Literal["off", "metadata", "full"]
    files: list[CaptureFileV1] = Field(description="sorted by path")
