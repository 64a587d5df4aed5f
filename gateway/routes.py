"""The allow-list: the only three things a run may ask the gateway for (spec §10.2, DESIGN §5).

Owns the mapping from (method, path) to an allowed route. A run's API lives under
``/runs/<binding_id>/v1`` and exposes exactly ``POST /v1/responses``, ``POST /v1/chat/completions`` and
``GET /v1/models``. Every other method or path — ``/server_info`` (it echoes the engine keys),
``/generate``, ``/flush_cache``, ``/abort_request``, profiling, weight updates, every admin route, query
strings on the allowed routes — is not a route here and is answered 404 ``inference_route_unavailable``
by the server without touching the engine — except the Responses API's other routes (compaction, stored
responses: ``/v1/responses/...``), which exist in the API but not on this text-only, stateless server:
:func:`unsupported_route` names them, and the server answers 404 ``inference_route_unsupported`` saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ALLOWED", "Route", "RouteName", "match_route", "unsupported_route"]

RouteName = Literal["/v1/responses", "/v1/chat/completions", "/v1/models"]

ALLOWED: dict[tuple[str, str], RouteName] = {
    ("POST", "/v1/responses"): "/v1/responses",
    ("POST", "/v1/chat/completions"): "/v1/chat/completions",
    ("GET", "/v1/models"): "/v1/models",
}


@dataclass(frozen=True)
class Route:
    binding_id: str
    name: RouteName


_RESPONSES_SUB = "/v1/responses/"


def _tail(raw_path: str) -> str | None:
    """The path after ``/runs/<id>`` (None when it is not a clean run path)."""
    if not raw_path.startswith("/runs/") or "?" in raw_path or "%" in raw_path or "#" in raw_path:
        return None
    rest = raw_path[6:]
    slash = rest.find("/")
    if slash <= 0 or not rest[:slash].isalnum():
        return None
    return rest[slash:]


def unsupported_route(method: str, raw_path: str) -> str | None:
    """For a Responses API route this server does not offer, the refusal's message; else None."""
    tail = _tail(raw_path)
    if tail is None or not tail.startswith(_RESPONSES_SUB):
        return None
    what = tail[len(_RESPONSES_SUB) :]
    if any(seg in ("", ".", "..") for seg in what.split("/")):
        return None  # an empty or dot segment is a path trick, not an API route
    if len(what) > 64 or not all(c.isalnum() or c in "_-/" for c in what):
        what = "..."  # the caller's path is echoed only when short and plain
    if what == "compact":
        return (
            f"{method} /v1/responses/compact is not supported: this server offers no compaction (it keeps no "
            "server-side state); compact the history on the client and send it whole to POST /v1/responses"
        )
    return (
        f"{method} /v1/responses/{what} is not supported: this server stores no responses (answers are never "
        "stored) and offers only POST /v1/responses"
    )


def match_route(method: str, raw_path: str) -> Route | None:
    """``/runs/<id>/v1/...`` -> Route, or None for anything not on the allow-list.

    ``raw_path`` is the undecoded request target; a query string, percent-escapes, dot segments or a
    doubled slash never match, so no path trick reaches the engine.
    """
    tail = _tail(raw_path)
    if tail is None:
        return None
    name = ALLOWED.get((method, tail))
    if name is None:
        return None
    return Route(raw_path[6 : len(raw_path) - len(tail)], name)
