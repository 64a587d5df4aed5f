"""ModelEndpointBindingV1: what one registered run may reach through the gateway (spec §10.1)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256

__all__ = ["ModelEndpointBindingV1"]


class ModelEndpointBindingV1(Record):
    schema_version: Literal["1"] = "1"
    binding_id: str
    run_id: str
    service_id: str
    inference_id: Sha256
    epoch: int = Field(ge=0)
    wire_model: str = Field(description="the only model name the run sees; derived from the model digest")
    base_url: str = Field(description="the gateway's URL for this run; never the engine's")
    token_ref: str = Field(description="path of the 0600 file holding the run token; never the token")
    state: Literal["active", "revoked", "sealed"]
    created_at: float
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        description="the run's candidate deadline (hitch run --deadline-s, a Harbor trial's budget): from its first "
        "model request, every request's timeout is min(time left, the lock's request timeout); null: none",
    )
