"""The pipeline's first stage, reading: a request body taken in, bounded in size before it is read and in time.

Owns :func:`body_limit` (the per-lock byte limit) and :func:`read_body`. The body is then parsed once and
checked (:func:`gateway.policy.apply_policy`, the pipeline's front).

- A body can never need more bytes than its prompt could hold: ``context * _BYTES_PER_TOKEN`` plus slack
  for tool schemas and JSON framing (a token of JSON-escaped text rarely exceeds a dozen bytes; 32 leaves
  room for escaped non-ASCII and long whitespace tokens). A declared ``Content-Length`` above the limit is
  refused before a byte of the body is read; a chunked body is read only up to the limit. Either way the
  answer is 413 ``inference_request_too_large``. A body that has not all arrived within the gateway's body
  timeout is 408 ``inference_request_timeout`` (:mod:`gateway.connections` then closes the connection).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from harness.errors import HitchError

__all__ = ["body_limit", "read_body"]

_BYTES_PER_TOKEN = 32
_SLACK_BYTES = 1 << 20


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
