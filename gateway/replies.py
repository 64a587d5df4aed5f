"""The gateway's own answers: the error body every refusal uses, and small JSON replies.

Owns the one error envelope ``{"error": {"code", "message", "type"}}`` (``code`` is a stable code from
``harness.errors.ERROR_TABLE``, ``type`` its category) with the table's HTTP status. Messages never carry
secrets; request ids travel in the ``x-hitch-request-id`` header.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from harness.errors import HitchError, spec_for

__all__ = ["REQUEST_ID_HEADER", "error_reply", "hitch_error_reply", "json_reply"]

REQUEST_ID_HEADER = "x-hitch-request-id"
_JSON = "application/json"


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return web.Response(body=body, status=status, content_type=_JSON, headers=headers)


def error_reply(code: str, message: str, request_id: str | None = None) -> web.Response:
    spec = spec_for(code)
    headers = {REQUEST_ID_HEADER: request_id} if request_id else None
    return json_reply({"error": {"code": code, "message": message, "type": spec.category}}, spec.http_status, headers)


def hitch_error_reply(exc: HitchError, request_id: str | None = None) -> web.Response:
    return error_reply(exc.code, exc.message, request_id)
