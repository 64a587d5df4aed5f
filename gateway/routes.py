"""The allow-list: the only three things a run may ask the gateway for (spec §10.2, DESIGN §5).

Owns the mapping from (method, path) to an allowed route. A run's API lives under
``/runs/<binding_id>/v1`` and exposes exactly ``POST /v1/responses``, ``POST /v1/chat/completions`` and
``GET /v1/models``. Every other method or path — ``/server_info`` (it echoes the engine keys),
``/generate``, ``/flush_cache``, ``/abort_request``, profiling, weight updates, every admin route, query
strings on the allowed routes — is not a route here and is answered 404 ``inference_route_unavailable``
by the server without touching the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ALLOWED", "Route", "RouteName", "match_route"]

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


def match_route(method: str, raw_path: str) -> Route | None:
    """``/runs/<id>/v1/...`` -> Route, or None for anything not on the allow-list.

    ``raw_path`` is the undecoded request target; a query string, percent-escapes, dot segments or a
    doubled slash never match, so no path trick reaches the engine.
    """
    if not raw_path.startswith("/runs/") or "?" in raw_path or "%" in raw_path or "#" in raw_path:
        return None
    rest = raw_path[6:]
    slash = rest.find("/")
    if slash <= 0:
        return None
    binding_id, tail = rest[:slash], rest[slash:]
    if not binding_id.isalnum():
        return None
    name = ALLOWED.get((method, tail))
    if name is None:
        return None
    return Route(binding_id, name)
