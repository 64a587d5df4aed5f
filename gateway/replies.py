"""The gateway's own answers: the error body every refusal uses, and small JSON replies.

Owns the one error envelope, OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``:

- ``code`` is our stable code from ``harness.errors.ERROR_TABLE`` (the table also decides the HTTP status);
- ``type`` is from OpenAI's set, chosen by status, so OpenAI clients classify the refusal as they would
  OpenAI's own: ``invalid_request_error`` for 4xx (OpenAI answers a bad key with it too), ``requests`` for a
  429 (OpenAI's request-rate limit type), ``server_error`` for 5xx;
- ``param`` names the one request field to blame, else null.

A 429 carries ``Retry-After``. Every reply names the server without a version (``Server: hitch-gateway``).
Messages never carry secrets; request ids travel in the ``x-hitch-request-id`` header.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from harness.errors import HitchError, spec_for

__all__ = ["REQUEST_ID_HEADER", "SERVER_NAME", "error_reply", "hitch_error_reply", "json_reply", "openai_error_type"]

REQUEST_ID_HEADER = "x-hitch-request-id"
SERVER_NAME = "hitch-gateway"
RETRY_AFTER_S = "1"  # a full queue drains at the engine's pace; a second is a polite first back-off
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


def error_reply(code: str, message: str, request_id: str | None = None, param: str | None = None) -> web.Response:
    status = spec_for(code).http_status
    headers = {REQUEST_ID_HEADER: request_id} if request_id else {}
    if status == 429:
        headers["Retry-After"] = RETRY_AFTER_S
    error = {"message": message, "type": openai_error_type(status), "param": param, "code": code}
    return json_reply({"error": error}, status, headers or None)


def hitch_error_reply(exc: HitchError, request_id: str | None = None) -> web.Response:
    param = exc.details.get("parameter")
    return error_reply(exc.code, exc.message, request_id, param if isinstance(param, str) else None)
