"""model-call: input and budget rules, exactly one request, error mapping (httpx mock transport)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from harness.agents.model_call import TOKEN_ENV, build_request, call_model, parse_input
from harness.contracts.binding import BindingCapabilitiesV1, ModelEndpointBindingV1
from harness.errors import HitchError
from harness.settings import env_name

URL = "http://gw/v1"
BINDING = ModelEndpointBindingV1(
    binding_id="b1",
    run_id="r1",
    service_id="svc-1",
    inference_id="sha256:" + "a" * 64,
    epoch=1,
    wire_model="w",
    base_url=URL,
    token_ref="/nowhere/b1.token",
    state="active",
    created_at=0.0,
    capabilities=BindingCapabilitiesV1(streaming=True, tool_calls=False, parallel_tool_calls=False, input_modalities=["text"]),
)


def test_budget_defaults_to_the_lock_and_may_only_shrink() -> None:
    assert build_request("w", "hi", 64)["max_output_tokens"] == 64
    assert build_request("w", "hi", 64, 8)["max_output_tokens"] == 8
    with pytest.raises(HitchError) as err:
        build_request("w", "hi", 64, 65)
    assert err.value.code == "inference_parameter_conflict"


@pytest.mark.parametrize(
    ("items", "code"),
    [
        ([{"type": "function_call_output", "call_id": "c", "output": "x"}], "inference_protocol_unsupported"),
        ([{"type": "computer_call", "action": {}}], "inference_protocol_unsupported"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}], "inference_modality_unsupported"),
        ([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}], "inference_modality_unsupported"),
        ([], "inference_protocol_unsupported"),
    ],
)
def test_tools_images_and_actions_are_refused_before_sending(items: list[Any], code: str) -> None:
    with pytest.raises(HitchError) as err:
        build_request("w", items, 64)
    assert err.value.code == code


def test_json_input_protocol() -> None:
    assert parse_input('[{"role": "user", "content": "x"}]') == [{"role": "user", "content": "x"}]
    assert parse_input("plain [text]") == "plain [text]"


def _response(output: list[Any], status: str = "completed") -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "status": status,
        "output": output,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


def _transport(seen: list[httpx.Request], status: int, body: Any) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handler)


def test_one_request_with_the_run_token() -> None:
    seen: list[httpx.Request] = []
    msg = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    body = build_request("w", "hi", 16)
    res = call_model(URL, body, binding=BINDING, env={TOKEN_ENV: "tok"}, transport=_transport(seen, 200, _response([msg])))
    assert res.text == "ok" and res.status == "completed"
    assert len(seen) == 1 and seen[0].url == "http://gw/v1/responses"
    assert seen[0].headers["authorization"] == "Bearer tok"
    assert "tools" not in json.loads(seen[0].content)


def test_empty_answer_and_incomplete_are_results() -> None:
    body = {**_response([], "incomplete"), "incomplete_details": {"reason": "max_output_tokens"}}
    res = call_model(
        URL, build_request("w", "hi", 16), binding=BINDING, env={TOKEN_ENV: "t"}, transport=_transport([], 200, body)
    )
    assert res.text == "" and res.status == "incomplete" and res.incomplete_reason == "max_output_tokens"


def test_gateway_refusal_keeps_its_code_and_is_not_retried() -> None:
    seen: list[httpx.Request] = []
    err_body = {"error": {"code": "inference_context_exceeded", "message": "too long", "type": "context"}}
    with pytest.raises(HitchError) as err:
        call_model(
            URL, build_request("w", "hi", 16), binding=BINDING, env={TOKEN_ENV: "t"}, transport=_transport(seen, 400, err_body)
        )
    assert err.value.code == "inference_context_exceeded" and len(seen) == 1


def test_openais_code_on_the_wire_maps_back_to_the_tables() -> None:
    err_body = {
        "error": {
            "code": "context_length_exceeded", "message": "too long", "type": "invalid_request_error", "param": None,
            "details": {"code": "inference_context_exceeded", "prompt_tokens": 9000},
        }
    }  # fmt: skip
    with pytest.raises(HitchError) as err:
        call_model(
            URL, build_request("w", "hi", 16), binding=BINDING, env={TOKEN_ENV: "t"}, transport=_transport([], 400, err_body)
        )
    assert err.value.code == "inference_context_exceeded"


@pytest.mark.parametrize(
    "body",
    [
        {"not": "a response"},
        _response([{"type": "function_call", "call_id": "c", "name": "x", "arguments": "{}"}]),
        {**_response([]), "status": "failed"},
    ],
)
def test_a_bad_answer_is_an_infrastructure_error(body: Any) -> None:
    with pytest.raises(HitchError) as err:
        call_model(URL, build_request("w", "hi", 16), binding=BINDING, env={TOKEN_ENV: "t"}, transport=_transport([], 200, body))
    assert err.value.code == "inference_upstream_failed"


def test_missing_token_sends_nothing() -> None:
    seen: list[httpx.Request] = []
    with pytest.raises(HitchError) as err:
        call_model(URL, build_request("w", "hi", 16), binding=BINDING, env={}, transport=_transport(seen, 200, _response([])))
    assert err.value.code == "inference_token_invalid" and seen == []


def test_the_bindings_credential_variable_is_the_one_harnesses_read() -> None:
    assert BINDING.credential_env_name == TOKEN_ENV == env_name("local_model_token")
    assert BINDING.kind == "managed-local" and BINDING.api == "responses"


@pytest.mark.parametrize(
    ("url", "model", "change", "code", "differs"),
    [
        ("http://elsewhere:9/v1", "w", {}, "inference_binding_mismatch", ["base_url"]),
        (URL, "another", {}, "inference_binding_mismatch", ["model"]),
        (URL, "w", {"api": "chat-completions"}, "inference_binding_mismatch", ["api"]),
        (URL, "w", {"state": "revoked"}, "inference_binding_revoked", None),
    ],
)
def test_a_call_off_its_issued_binding_sends_nothing(
    url: str, model: str, change: dict[str, Any], code: str, differs: list[str] | None
) -> None:
    """model-call calls only the base URL and wire model of the binding the daemon issued (spec §10.1)."""
    seen: list[httpx.Request] = []
    binding = BINDING.model_copy(update=change)
    with pytest.raises(HitchError) as err:
        call_model(
            url,
            build_request(model, "hi", 16),
            binding=binding,
            env={TOKEN_ENV: "t"},
            transport=_transport(seen, 200, _response([])),
        )
    assert err.value.code == code and seen == []
    if differs is not None:
        assert sorted(err.value.details["differs"]) == differs


def test_a_binding_record_written_before_the_spec_fields_still_loads() -> None:
    """Run evidence keeps ``binding.json``: one written before kind/api/credential_env_name/capabilities loads."""
    old = BINDING.to_json_dict()
    for name in ("kind", "api", "credential_env_name", "capabilities"):
        old.pop(name)
    loaded = ModelEndpointBindingV1.model_validate_json(json.dumps(old))
    assert loaded.kind == "managed-local" and loaded.api == "responses" and loaded.capabilities is None
