"""InferenceRuntimeManifestV1: one pinned runtime package (spec §6.1, §7.1).

The package is a discriminated union on ``kind``: ``oci`` (an image pinned by digest)
or ``python-env`` (a private venv built from a hash-pinned requirements lock plus any
files shipped with it, such as the generic-CPU runtime's ``sgl_kernel`` shim).
``runtime_id`` covers the whole package, not only the SGLang version.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer

from harness.contracts.base import Record, Sha256

__all__ = [
    "InferenceRuntimeManifestV1",
    "OciPackage",
    "PackageFile",
    "PythonEnvPackage",
    "RuntimeLicensesV1",
    "RuntimePackage",
]


def _without_null(data: dict[str, Any], key: str) -> dict[str, Any]:
    """The operator-pin fields are left out when unset, so every catalog-pinned runtime keeps its runtime_id."""
    if data.get(key) is None:
        data.pop(key, None)
    return data


class OciPackage(Record):
    kind: Literal["oci"] = "oci"
    image: str = Field(description="repository, e.g. lmsysorg/sglang")
    tag_hint: str | None = Field(default=None, description="human hint only; never written into a lock")
    digest: Sha256 | None = Field(description="image manifest digest; null = unpinned, refused for certification")
    platform: str = "linux/amd64"
    digest_source: Literal["repo_digest", "image_id"] | None = Field(
        default=None,
        description="set by an operator pin: repo_digest (registry manifest) or image_id (a local image's ID); "
        "absent for the catalog's own digests",
    )

    @model_serializer(mode="wrap")
    def _omit_unset_source(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_null(handler(self), "digest_source")

    def reference(self) -> str:
        """How Docker is told the image: by its manifest digest, or (operator pin of a local build) by its ID."""
        if self.digest is None:
            raise ValueError("an unpinned image has no reference")
        return self.digest if self.digest_source == "image_id" else f"{self.image}@{self.digest}"


class PackageFile(Record):
    path: str = Field(description="path relative to the runtime's catalog folder")
    sha256: Sha256


class PythonEnvPackage(Record):
    kind: Literal["python-env"] = "python-env"
    python: str = Field(description="major.minor of the interpreter the lock was resolved for")
    lock_file: PackageFile = Field(description="the hash-pinned requirements lock")
    files: list[PackageFile] = Field(default_factory=list, description="other shipped files (e.g. shim), sorted")
    pythonpath: list[str] = Field(default_factory=list, description="catalog-relative dirs put on PYTHONPATH")


RuntimePackage = Annotated[OciPackage | PythonEnvPackage, Field(discriminator="kind")]


class RuntimeLicensesV1(Record):
    """The licences a runtime carries (spec §7.1.5: kept with the SGLang and image dependency licences, as the model's
    is kept in its manifest's provenance). Stated by the catalog; a licence is a statement, not a verified fact."""

    engine: str = Field(description="SGLang's licence (SPDX)")
    dependencies: dict[str, str] = Field(
        default_factory=dict,
        description="the main packages the runtime bundles -> their licence as their wheels declare it (SPDX or LicenseRef)",
    )
    image: str | None = Field(default=None, description="oci: the image's own terms as a whole; null: not established")


class InferenceRuntimeManifestV1(Record):
    schema_version: Literal["1"] = "1"
    runtime_id: Sha256
    name: str = Field(description="catalog id, e.g. sglang-0.5.23-cpu-generic")
    engine: Literal["sglang"] = "sglang"
    engine_version: str
    engine_commit: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")] | None = Field(
        description="upstream git commit of the engine source; null when it could not be established"
    )
    backend: Literal["cpu", "cuda"]
    cpu_feature_requirement: Literal["amx", "none"] | None = None
    certifiable: bool = Field(description="catalog says this runtime may back a `certified` level")
    pinned: bool = Field(description="every artifact is pinned by digest/hash")
    torch_version: str | None = None
    cuda_version: str | None = None
    launch_env: dict[str, str] = Field(default_factory=dict, description="engine environment the runtime needs")
    package: RuntimePackage
    pinned_by: Literal["operator"] | None = Field(
        default=None, description="operator: pinned by `hitch runtime pin` (an overlay under HITCH_ROOT), not the catalog"
    )
    licenses: RuntimeLicensesV1 | None = Field(
        default=None,
        description="the licences the catalog states for it; not part of runtime_id (the package's digest or lock already "
        "pins the bytes they describe); absent when the catalog states none (and in older manifests)",
    )

    @model_serializer(mode="wrap")
    def _omit_catalog_pin(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_null(_without_null(handler(self), "pinned_by"), "licenses")
