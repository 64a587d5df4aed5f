"""Taking a request body in: bounded in size before it is read, parsed once, bounded in nesting.

Owns :func:`body_limit` (the per-lock byte limit), :func:`read_body` and :func:`parse_object`.

- A body can never need more bytes than its prompt could hold: ``context * _BYTES_PER_TOKEN`` plus slack
  for tool schemas and JSON framing (a token of JSON-escaped text rarely exceeds a dozen bytes; 32 leaves
  room for escaped non-ASCII and long whitespace tokens). A declared ``Content-Length`` above the limit is
  refused before a byte of the body is read; a chunked body is read only up to the limit. Either way the
  answer is 413 ``inference_request_too_large``. A body that has not all arrived within the gateway's body
  timeout is 408 ``inference_request_timeout`` (:mod:`gateway.connections` then closes the connection).
- ``json.loads`` guards its own recursion: a nesting bomb raises ``RecursionError`` at the interpreter's
  limit, which is refused as a malformed body. That limit depends on the stack the parser runs on, so a
  body just under the gateway's can be over the engine's (the fake engine answered a 980-deep tool schema
  with a bare 500): a body may nest at most :data:`BODY_MAX_DEPTH` deep. The walk that proves it
  (:func:`check_depth`, iterative) runs only when the body has more brackets than that, which agent
  requests of ordinary length do not. Rarely sent free-form values (metadata, output-format schemas) are
  held to :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from harness.errors import HitchError

__all__ = ["BODY_MAX_DEPTH", "MAX_DEPTH", "body_limit", "check_depth", "parse_object", "read_body"]

_BYTES_PER_TOKEN = 32
_SLACK_BYTES = 1 << 20
MAX_DEPTH = 64
BODY_MAX_DEPTH = 512


def body_limit(context_tokens: int, override: int | None = None) -> int:
    """The most bytes a request body for a lock with this context may have."""
    return override if override is not None else context_tokens * _BYTES_PER_TOKEN + _SLACK_BYTES


def _too_large(limit: int) -> HitchError:
    return HitchError(
        "inference_request_too_large", f"the request body is over the gateway's limit of {limit} bytes", {"limit_bytes": limit}
    )


async def read_body(request: web.BaseRequest, limit: int, timeout_s: float | None = None) -> bytes:
    """The whole body, or 413 as soon as it is known to exceed ``limit`` (declared, or while reading), or 408
    ``inference_request_timeout`` when it has not all arrived within ``timeout_s`` (None: no bound)."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _too_large(limit)
    content = request.content
    chunks: list[bytes] = []
    total = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                chunk = await content.readany()
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise HitchError(
            "inference_request_timeout",
            f"the request body did not arrive within {timeout_s:g} s",
            {"timeout_s": timeout_s},
        ) from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def parse_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or ``inference_protocol_unsupported`` (400)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        body = None
    if not isinstance(body, dict):
        raise HitchError("inference_protocol_unsupported", "the request body must be a JSON object", {})
    if raw.count(b"{") + raw.count(b"[") > BODY_MAX_DEPTH:  # else it cannot nest that deep: no walk
        try:
            check_depth(body, "body", BODY_MAX_DEPTH)
        except HitchError:
            raise HitchError(
                "inference_protocol_unsupported", f"the request body nests deeper than {BODY_MAX_DEPTH} levels", {}
            ) from None
    return body


def check_depth(value: Any, param: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``value`` when its containers nest deeper than ``limit``: a level-by-level walk (no recursion
    to blow, no per-node allocation beyond the next level's list)."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise HitchError(
                "inference_parameter_conflict", f"{param} nests deeper than {limit} levels", {"parameter": param, "limit": limit}
            )
        nxt = []
        for node in level:
            for child in node.values() if type(node) is dict else node:
                if type(child) is dict or type(child) is list:
                    nxt.append(child)
        level = nxt
