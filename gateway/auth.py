"""Run-token extraction and the header set sent to the engine (spec §10.2, §11.2).

Owns two decisions:

- which token a caller presented: only ``Authorization: Bearer <token>`` (scheme case-insensitive);
  ``x-api-key``, cookies and query strings are never credentials here. The comparison itself is constant
  time and lives in :meth:`gateway.bindings.BindingRegistry.resolve`.
- which headers reach the engine: an allow-list, not a deny-list. The engine sees ``Authorization`` with
  the engine key, ``Content-Type``, and the caller's ``Accept`` / ``User-Agent``; every other caller
  header — ``Authorization``, ``x-api-key``, ``Cookie``, ``Forwarded``, ``X-Forwarded-*``, ``Proxy-*``,
  hop-by-hop headers, ``OpenAI-*`` — is dropped. Nothing is read from the environment, so cloud
  credentials there can never be forwarded.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["FORWARDED_CALLER_HEADERS", "bearer_token", "engine_headers"]

FORWARDED_CALLER_HEADERS = ("Accept", "User-Agent")


def bearer_token(authorization: str | None) -> bytes | None:
    """The token of an ``Authorization: Bearer`` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        return None
    return token.encode()


def engine_headers(caller: Mapping[str, str], engine_key: str, json_body: bool) -> dict[str, str]:
    """The complete header set for the engine request (aiohttp adds Host, Content-Length, Connection)."""
    headers = {"Authorization": "Bearer " + engine_key}
    if json_body:
        headers["Content-Type"] = "application/json"
    for name in FORWARDED_CALLER_HEADERS:
        value = caller.get(name)
        if value is not None:
            headers[name] = value
    return headers
