"""The gateway's own answers: the error body every refusal uses, and small JSON replies.

Owns the one error envelope, OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``:

- ``code`` is our stable code from ``harness.errors.ERROR_TABLE`` (the table also decides the HTTP status),
  except where OpenAI has its own code for the same refusal, which its clients act on: a context overflow is
  ``context_length_exceeded`` (the openai SDK and Codex recognise it; Codex then stops instead of retrying).
  There the table's code travels in ``details.code`` beside the refusal's details (token counts), and the
  evidence row keeps the table's code;
- ``type`` is from OpenAI's set, chosen by status, so OpenAI clients classify the refusal as they would
  OpenAI's own: ``invalid_request_error`` for 4xx (OpenAI answers a bad key with it too), ``requests`` for a
  429 (OpenAI's request-rate limit type), ``server_error`` for 5xx;
- ``param`` names the one request field to blame, else null.

A 429 (the gateway's queue is full) and an ``inference_queue_timeout`` carry ``Retry-After``. Every reply
names the server without a version (``Server: hitch-gateway``). Messages never carry secrets; request ids
travel in the ``x-hitch-request-id`` header.

Also owns :func:`stream_error_event`: the terminal error event the gateway writes when it ends a stream that
already answered 200 (chat: an in-band ``data: {"error": ...}`` then ``data: [DONE]``, as SGLang ends a
failed stream; Responses: ``response.failed`` with the error).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from aiohttp import web

from harness.errors import HitchError, spec_for

__all__ = [
    "OPENAI_CODES",
    "REQUEST_ID_HEADER",
    "SERVER_NAME",
    "error_reply",
    "hitch_error_reply",
    "json_reply",
    "openai_error_type",
    "raw_error_reply",
    "stream_error_event",
]

REQUEST_ID_HEADER = "x-hitch-request-id"
SERVER_NAME = "hitch-gateway"
RETRY_AFTER_S = "1"  # a full queue drains at the engine's pace; a second is a polite first back-off
_RETRY_AFTER_CODES = frozenset({"inference_queue_full", "inference_queue_timeout", "inference_connection_limit"})
# table code -> OpenAI's own code for the same refusal (what OpenAI clients act on)
OPENAI_CODES = {"inference_context_exceeded": "context_length_exceeded"}
_JSON = "application/json"


def openai_error_type(status: int) -> str:
    if status == 429:
        return "requests"
    return "server_error" if status >= 500 else "invalid_request_error"


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    resp = web.Response(body=body, status=status, content_type=_JSON, headers=headers)
    resp.headers["Server"] = SERVER_NAME
    return resp


def _envelope(
    code: str, message: str, param: str | None, details: dict[str, Any] | None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The status, body and extra headers of a refusal."""
    status = spec_for(code).http_status
    headers = {"Retry-After": RETRY_AFTER_S} if status == 429 or code in _RETRY_AFTER_CODES else {}
    error: dict[str, Any] = {"message": message, "type": openai_error_type(status), "param": param, "code": code}
    wire = OPENAI_CODES.get(code)
    if wire is not None:
        error["code"] = wire
        error["details"] = {**(details or {}), "code": code}
    return status, {"error": error}, headers


def error_reply(
    code: str,
    message: str,
    request_id: str | None = None,
    param: str | None = None,
    details: dict[str, Any] | None = None,
) -> web.Response:
    status, body, headers = _envelope(code, message, param, details)
    if request_id:
        headers[REQUEST_ID_HEADER] = request_id
    return json_reply(body, status, headers or None)


def raw_error_reply(code: str, message: str) -> bytes:
    """A whole HTTP/1.1 refusal as bytes, ending the connection: for a connection the gateway answers outside any
    request (a head that never finished, a connection past the cap)."""
    status, body, headers = _envelope(code, message, None, None)
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        f"Server: {SERVER_NAME}",
        f"Content-Type: {_JSON}",
        f"Content-Length: {len(data)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def hitch_error_reply(exc: HitchError, request_id: str | None = None) -> web.Response:
    param = exc.details.get("parameter")
    return error_reply(exc.code, exc.message, request_id, param if isinstance(param, str) else None, exc.details)


def stream_error_event(api: str, code: str, message: str, response_id: str | None) -> bytes:
    """The last event of a stream the gateway ends itself (the chunked body then ends cleanly)."""
    status = spec_for(code).http_status
    error = {"message": message, "type": openai_error_type(status), "param": None, "code": OPENAI_CODES.get(code, code)}
    if api == "chat":
        return b"data: " + json.dumps({"error": error}, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n"
    response = {"id": response_id, "object": "response", "status": "failed", "error": {"code": error["code"], "message": message}}
    data = json.dumps({"type": "response.failed", "response": response}, separators=(",", ":"))
    return b"event: response.failed\ndata: " + data.encode() + b"\n\n"
