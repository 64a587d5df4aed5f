"""The daemon API's wire form: a request body read and validated, an answer or an error written.

Every answer carries ``schema_version``; an error is ``{"error": HitchError.to_dict()}`` with the error table's
HTTP status. A body is a JSON object (absent: ``{}``) validated by its model of :mod:`harness.app.requests`.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from aiohttp import web

from harness.app.requests import Request, parse_request
from harness.errors import HitchError

__all__ = ["API_SCHEMA_VERSION", "body_of", "error_reply", "reply"]

API_SCHEMA_VERSION = "1"
R = TypeVar("R", bound=Request)


def reply(payload: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response({"schema_version": API_SCHEMA_VERSION, **payload}, status=status)


def error_reply(err: HitchError) -> web.Response:
    return reply({"error": err.to_dict()}, status=err.spec.http_status)


async def body_of(request: web.Request, model: type[R]) -> R:
    """The request's JSON body (absent: ``{}``) validated as ``model``; anything else is a ``usage_error``."""
    data: Any = {}
    if request.can_read_body:
        try:
            data = await request.json()
        except (ValueError, json.JSONDecodeError) as exc:
            raise HitchError("usage_error", "the request body is not JSON", {}) from exc
    if not isinstance(data, dict):
        raise HitchError("usage_error", "the request body must be a JSON object", {})
    return parse_request(model, data)
