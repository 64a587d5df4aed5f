"""InferenceServiceRecordV1: one running (or finished) engine service (spec §6.1, §9.1).

Holds identities and references only: never a plaintext token or key.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256

__all__ = [
    "DeviceAllocationV1",
    "EngineName",
    "InferenceServiceRecordV1",
    "LauncherName",
    "LeaseV1",
    "ProcessIdentityV1",
    "ServiceState",
]

ServiceState = Literal["absent", "starting", "ready", "draining", "stopped", "failed"]
EngineName = Literal["sglang", "fake"]  # fake: the contract instrument (fixtures.fake_sglang), never certified
LauncherName = Literal["process", "oci"]


class ProcessIdentityV1(Record):
    launcher: LauncherName
    pid: int | None = None
    start_time: float | None = Field(default=None, description="process start time (psutil create_time)")
    container_id: str | None = None
    image_id: str | None = None
    network_id: str | None = Field(default=None, description="oci: the internal network hitch created for this epoch")
    network_subnet: str | None = Field(default=None, description="oci: that network's subnet (CIDR)")


class DeviceAllocationV1(Record):
    device: Literal["cpu", "cuda"]
    gpu_uuid: str | None = None
    cpu_cores: list[int] = Field(default_factory=list)


class LeaseV1(Record):
    lease_id: str
    owner: str
    acquired_at: float


class InferenceServiceRecordV1(Record):
    schema_version: Literal["1"] = "1"
    service_id: str
    inference_id: Sha256
    isolation_key: Sha256
    state: ServiceState
    epoch: int = Field(ge=0)
    owner: str
    process: ProcessIdentityV1 | None = None
    allocation: DeviceAllocationV1
    leases: list[LeaseV1] = Field(default_factory=list)
    endpoint_ref: str | None = Field(default=None, description="private file holding the endpoint; no secrets here")
    created_at: float
    updated_at: float
    error_code: str | None = None
    error_message: str | None = None
