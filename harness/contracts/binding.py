"""ModelEndpointBindingV1: what one registered run may reach through the gateway (spec §10.1)."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from harness.contracts.base import Record, Sha256

__all__ = ["BINDING_CREDENTIAL_ENV", "BindingCapabilitiesV1", "ModelEndpointBindingV1"]

BINDING_CREDENTIAL_ENV: Final = "HITCH_LOCAL_MODEL_TOKEN"  # where a harness finds its run token (settings' local_model_token)


class BindingCapabilitiesV1(Record):
    """What the run's lock lets a harness ask through this binding (copied from the lock's protocol)."""

    streaming: bool
    tool_calls: bool
    parallel_tool_calls: bool
    input_modalities: list[Literal["text"]] = Field(min_length=1, max_length=1)


class ModelEndpointBindingV1(Record):
    """Made by the daemon when it registers a run, never given by a run's own JSON; the secret is never in it
    (its 0600 file is named, and a harness reads it from ``credential_env_name``). The fields of spec §10.1 that
    older records lack load as their only value then (``kind``, ``api``, ``credential_env_name``) or as null
    (``capabilities``)."""

    schema_version: Literal["1"] = "1"
    kind: Literal["managed-local"] = "managed-local"
    api: Literal["responses", "chat-completions"] = Field(
        default="responses", description="the lock's API (what the run's harness speaks to the gateway)"
    )
    credential_env_name: Literal["HITCH_LOCAL_MODEL_TOKEN"] = Field(
        default=BINDING_CREDENTIAL_ENV, description="the environment variable a harness reads the run token from"
    )
    capabilities: BindingCapabilitiesV1 | None = Field(
        default=None, description="the lock's streaming, tool-call and modality claims; null only in older records"
    )
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
