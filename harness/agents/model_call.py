"""The ``model-call`` harness: exactly one Responses request through a run's binding (spec §10.3, §10.4, §15.2).

Owns :func:`build_request` (checks the input and budget before anything is sent) and :func:`call_model` (one
``POST {base_url}/responses``, unary, no tools, no retries; the token comes from ``HITCH_LOCAL_MODEL_TOKEN``;
the base URL and model must be those of the binding the daemon issued for the run, :func:`require_binding`).

- Input is a prompt string or the JSON input list of message items; tools, images (any non-text part),
  and action items (function calls and outputs, computer/shell calls, ...) are refused with
  ``inference_protocol_unsupported`` / ``inference_modality_unsupported``, before any request.
- Output budget: the lock's ``max_output_tokens`` when the input has none; a larger one is
  ``inference_parameter_conflict``.
- A gateway error answer becomes the same ``HitchError`` code (the table's, also where the wire carries
  OpenAI's own code, e.g. ``context_length_exceeded``, with the table's in ``details.code``); an answer that
  is not a Responses object is ``inference_upstream_failed`` (an infrastructure error). A legal empty answer
  is a result with text "".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness.contracts.binding import ModelEndpointBindingV1
from harness.errors import ERROR_TABLE, HitchError
from harness.settings import env_name, settings

__all__ = ["TOKEN_ENV", "ModelCallResult", "build_request", "call_model", "parse_input", "require_binding"]

TOKEN_ENV = env_name("local_model_token")
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_ROLES = frozenset({"user", "system", "developer", "assistant"})


@dataclass(frozen=True)
class ModelCallResult:
    response_id: str
    status: str  # completed | incomplete
    text: str
    usage: dict[str, Any]
    incomplete_reason: str | None
    request_body: dict[str, Any] = field(repr=False)
    http_status: int = 200


def _check_item(i: int, item: Any) -> dict[str, Any]:
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise HitchError("inference_protocol_unsupported", f"{where} must be a message object", {"index": i})
    kind = item.get("type", "message")
    if kind != "message":
        raise HitchError(
            "inference_protocol_unsupported",
            f"{where}: model-call sends messages only; {kind!r} items (tools/actions) are refused",
            {"index": i, "item_type": kind},
        )
    if item.get("role") not in _ROLES:
        raise HitchError("inference_protocol_unsupported", f"{where}: unknown role {item.get('role')!r}", {"index": i})
    content = item.get("content")
    if isinstance(content, list):
        for part in content:
            ptype = part.get("type") if isinstance(part, dict) else None
            if ptype not in _TEXT_PARTS or not isinstance(part.get("text"), str):
                raise HitchError(
                    "inference_modality_unsupported", f"{where}: content part {ptype!r} is not text", {"part_type": ptype}
                )
    elif not isinstance(content, str):
        raise HitchError("inference_protocol_unsupported", f"{where}: content must be text", {"index": i})
    return {k: v for k, v in item.items() if k in ("type", "role", "content")}


def build_request(
    wire_model: str, prompt: str | list[Any], lock_budget: int, max_output_tokens: int | None = None
) -> dict[str, Any]:
    """The one request body, or a refusal before anything is sent."""
    if isinstance(prompt, str):
        items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": prompt}]
    elif isinstance(prompt, list) and prompt:
        items = [_check_item(i, item) for i, item in enumerate(prompt)]
    else:
        raise HitchError("inference_protocol_unsupported", "the input is a prompt string or a non-empty message list", {})
    if max_output_tokens is None:
        budget = lock_budget
    elif isinstance(max_output_tokens, bool) or not isinstance(max_output_tokens, int) or max_output_tokens < 1:
        raise HitchError("inference_parameter_conflict", "max_output_tokens must be a positive integer", {})
    elif max_output_tokens > lock_budget:
        raise HitchError(
            "inference_parameter_conflict",
            f"max_output_tokens={max_output_tokens} is above the lock's output budget {lock_budget}",
            {"parameter": "max_output_tokens", "lock_value": lock_budget},
        )
    else:
        budget = max_output_tokens
    return {"model": wire_model, "input": items, "max_output_tokens": budget, "store": False, "stream": False}


def parse_input(text: str) -> str | list[Any]:
    """``--prompt`` text, or with a leading ``[`` the JSON input list (the current model-call input protocol)."""
    if text.lstrip().startswith("["):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise HitchError("inference_protocol_unsupported", "the JSON input is not valid JSON", {}) from exc
        if isinstance(value, list):
            return value
    return text


def _error_from(resp: httpx.Response) -> HitchError:
    try:
        err = resp.json().get("error", {})
    except (ValueError, AttributeError):
        err = {}
    code = err.get("code") if isinstance(err, dict) else None
    message = err.get("message") if isinstance(err, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    if isinstance(details, dict) and details.get("code") in ERROR_TABLE:
        code = details["code"]  # OpenAI's own code on the wire (context_length_exceeded); the table's code beside it
    if isinstance(code, str) and code in ERROR_TABLE:
        return HitchError(code, str(message or code), {"http_status": resp.status_code})
    return HitchError(
        "inference_upstream_failed", f"the gateway answered HTTP {resp.status_code}", {"http_status": resp.status_code}
    )


def _parse(body: Any, request_body: dict[str, Any]) -> ModelCallResult:
    bad = HitchError("inference_upstream_failed", "the answer is not a Responses object", {})
    if not isinstance(body, dict) or body.get("object") != "response" or not isinstance(body.get("output"), list):
        raise bad
    status = body.get("status")
    if status not in ("completed", "incomplete"):
        raise HitchError("inference_upstream_failed", f"the response status is {status!r}", {"status": status})
    texts: list[str] = []
    for item in body["output"]:
        if not isinstance(item, dict):
            raise bad
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
        elif item.get("type") != "reasoning":
            raise HitchError(
                "inference_upstream_failed", f"model-call got a {item.get('type')!r} output item", {"item": item.get("type")}
            )
    usage = body.get("usage")
    details = body.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    return ModelCallResult(
        response_id=str(body.get("id", "")),
        status=str(status),
        text="".join(texts),
        usage=usage if isinstance(usage, dict) else {},
        incomplete_reason=reason if isinstance(reason, str) else None,
        request_body=request_body,
    )


def require_binding(base_url: str, body: Mapping[str, Any], binding: ModelEndpointBindingV1) -> None:
    """``base_url`` and ``body`` must be those of ``binding``, the one the daemon issued for the run (spec §10.1: a
    URL never comes from a run's own JSON): an active managed-local Responses binding, its base URL, its wire
    model, its credential variable; ``inference_binding_mismatch`` (or ``_revoked``) before anything is sent."""
    if binding.state != "active":
        raise HitchError("inference_binding_revoked", f"binding {binding.binding_id} is {binding.state}", {})
    problems = {
        "base_url": (base_url.rstrip("/"), binding.base_url.rstrip("/")),
        "api": ("responses", binding.api),
        "model": (body.get("model"), binding.wire_model),
        "credential_env_name": (TOKEN_ENV, binding.credential_env_name),
    }
    differs = {name: {"given": given, "binding": issued} for name, (given, issued) in problems.items() if given != issued}
    if differs:
        raise HitchError(
            "inference_binding_mismatch",
            f"model-call's {', '.join(differs)} is not the issued binding's ({binding.binding_id})",
            {"binding_id": binding.binding_id, "differs": differs},
        )


def call_model(
    base_url: str,
    body: dict[str, Any],
    *,
    binding: ModelEndpointBindingV1,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
    transport: httpx.BaseTransport | None = None,
) -> ModelCallResult:
    """One request, no retries, to ``base_url`` when it is ``binding``'s (:func:`require_binding`); the token is
    read from ``HITCH_LOCAL_MODEL_TOKEN`` of ``env``."""
    require_binding(base_url, body, binding)
    secret = settings(env).local_model_token
    token = secret.reveal() if secret is not None else ""
    if not token:
        raise HitchError("inference_token_invalid", f"{TOKEN_ENV} is not set", {"env": TOKEN_ENV})
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    url = base_url.rstrip("/") + "/responses"
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False, transport=transport) as client:
            resp = client.post(url, content=json.dumps(body).encode(), headers=headers)
    except httpx.HTTPError as exc:
        raise HitchError("inference_upstream_failed", f"the gateway did not answer: {type(exc).__name__}", {}) from exc
    if resp.status_code != 200:
        raise _error_from(resp)
    try:
        parsed = resp.json()
    except ValueError as exc:
        raise HitchError("inference_upstream_failed", "the answer is not JSON", {}) from exc
    return _parse(parsed, body)
