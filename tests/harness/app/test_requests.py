"""The daemon's request models as the client sends them: ``body()`` carries what the caller set (never a ``None``
or an empty default, so a run's recorded request is what was asked), and the daemon reads it back unchanged."""

from __future__ import annotations

import pytest

from harness.app.requests import (
    AcquireRequest,
    DeviceChoiceV1,
    FinishRunRequest,
    PrepareRequest,
    Request,
    RunErrorIn,
    RunRequest,
    ShutdownRequest,
    StopServiceRequest,
    parse_request,
)
from harness.errors import HitchError

CHOICE = DeviceChoiceV1(requested="auto", device="cpu", certified=False, allow_uncertified=True, reasons=["cpu: no AMX"])
SENT: list[Request] = [
    RunRequest(model="local/tiny", runtime="rt", device_choice=CHOICE, run_id="r-1", harness="model-call"),
    RunRequest(inference_id="sha256:" + "a" * 64, fake_flags=["--fault", "slow"], for_containers=True, eval_image="img"),
    PrepareRequest(model="local/tiny", runtime="rt", context_tokens=4096),
    AcquireRequest(owner="o", inference_id="sha256:" + "b" * 64, cache_scope_owner="s"),
    FinishRunRequest(status="failed", error=RunErrorIn(code="run_cancelled", message="stopped")),
    StopServiceRequest(force=True),
    ShutdownRequest(force=False),
]


@pytest.mark.parametrize("request_model", SENT, ids=[type(r).__name__ for r in SENT])
def test_the_daemon_reads_back_what_the_client_sends(request_model: Request) -> None:
    body = request_model.body()
    assert None not in body.values() and [] not in body.values()
    assert parse_request(type(request_model), body) == request_model


def test_the_body_omits_what_the_caller_left_unset() -> None:
    body = RunRequest(model="local/tiny", runtime="rt").body()
    assert not {"fake_flags", "for_containers", "image", "run_id", "inference_id", "device_choice"} & set(body)
    assert StopServiceRequest().body() == {} and ShutdownRequest(force=False).body() == {"force": False}


def test_a_bad_body_names_its_field() -> None:
    with pytest.raises(HitchError) as exc:
        parse_request(PrepareRequest, {"model": "local/tiny", "runtime": "rt", "device": "metal"})
    assert exc.value.code == "usage_error"
    assert [p["loc"] for p in exc.value.details["problems"]] == ["device"]
