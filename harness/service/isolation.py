"""Which engine service a caller may share: the isolation key of spec §8.3.

``isolation_key = H(inference_id, cache_scope_owner)``. The manager keys its services by it:

- the throughput profile runs SGLang's radix prefix cache, and a cache is shared state, so a caller
  only shares a service with callers of the same cache scope owner (a run, or an eval/candidate
  boundary the caller names). Runs in different scopes never share a service, hence never a cache;
- the baseline profile disables the prefix cache, so nothing leaks between callers through the engine:
  every caller of the same lock uses the one fixed scope :data:`SHARED_SCOPE` and may share a service;
- different locks have different ``inference_id`` values and therefore never share a service.

A radix-cache acquire that names no scope owner is scoped to its own ``owner``: the safe default is
to share nothing rather than everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.contracts.lock import InferenceLockV1
from harness.ids import digest_json

__all__ = ["SHARED_SCOPE", "ServiceKey", "cache_scope_for", "isolation_key", "service_key", "service_id_for"]

# The scope of every caller of a lock whose prefix cache is disabled.
SHARED_SCOPE = "shared:prefix-cache-disabled"


@dataclass(frozen=True)
class ServiceKey:
    """The identity of one shareable service (stable across its epochs)."""

    inference_id: str
    cache_scope: str
    isolation_key: str
    service_id: str


def cache_scope_for(lock: InferenceLockV1, owner: str, cache_scope_owner: str | None) -> str:
    """The cache scope an acquire runs in (see the module docstring)."""
    if lock.execution.prefix_cache.mode == "disabled":
        return SHARED_SCOPE
    return f"owner:{cache_scope_owner if cache_scope_owner is not None else owner}"


def isolation_key(inference_id: str, cache_scope: str) -> str:
    """``H(inference_id, cache_scope_owner)`` as a ``sha256:<hex>`` id."""
    return digest_json({"cache_scope_owner": cache_scope, "inference_id": inference_id})


def service_id_for(key: str) -> str:
    """A short, path-safe service id derived from the isolation key (no secrets, no host data)."""
    return "svc-" + key.split(":", 1)[1][:24]


def service_key(lock: InferenceLockV1, owner: str, cache_scope_owner: str | None) -> ServiceKey:
    scope = cache_scope_for(lock, owner, cache_scope_owner)
    key = isolation_key(lock.inference_id, scope)
    return ServiceKey(lock.inference_id, scope, key, service_id_for(key))
