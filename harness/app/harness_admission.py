"""The one admission rule for a run's harness (spec §9.1 step 1), asked at every door: ``hitch run`` and ``hitch eval
harbor run`` before anything starts, and the daemon's ``POST /v1/runs`` before a run is admitted.

:func:`admit_harness` checks a :class:`~harness.app.requests.RunRequest`'s ``harness`` against the lock surface
it asks for (:func:`lock_surface`: its pinned sealed lock, else its model and runtime — nothing starts):

- none (``hitch local serve``): no harness, nothing to check;
- ``model-call``: the lock's own Responses text path; it needs a Responses lock and no recorded profile;
- ``codex`` and ``harbor:<agent>`` (an agent that calls a model): the request names the harness's exact artifact
  (``harness_artifact``: artifact, version, protocol — found by the caller, who runs it), and a passing
  compatibility profile for it, this runtime and this model, on the request's engine, must be recorded; the lock
  must claim what the harness always sends for the fields it fixes. A Harbor artifact names its agent
  (``harbor@<version>:<agent>``), so one agent's profile never admits another;
- ``harbor:oracle`` / ``harbor:nop``: they call no model, so there is nothing to be compatible with;
- a run that certifies its harness (``certifying``: ``pytest certify``'s Harbor trials, which record the profile)
  needs none yet; its run record keeps that it was one;
- anything else is refused.

Every refusal is ``inference_harness_unsupported``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.app.profiles import CODEX_FIELDS, NO_MODEL_AGENTS, ProfileStore, require_lock_values
from harness.app.requests import RunRequest
from harness.contracts.agent_profile import HarnessCompatibilityProfileV1, HarnessKeyV1
from harness.errors import HitchError
from harness.lock import claims_parallel_tool_calls, load_sealed_lock
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.store import resolve_model

__all__ = ["HARBOR_PREFIX", "LockSurface", "admit_harness", "lock_surface", "needs_tool_calls"]

HARBOR_PREFIX = "harbor:"
_CHOICES = ["model-call", "codex", "harbor:<agent>"]
_TOOL_CALLING = frozenset({"codex"})  # harnesses whose every turn may carry function tools


def needs_tool_calls(harness: str | None) -> bool:
    """Whether ``harness`` needs the engine's tool calls (spec §9.1 step 5: probed as the caller needs)."""
    return harness in _TOOL_CALLING


@dataclass(frozen=True)
class LockSurface:
    """What a harness is admitted against: the lock's runtime, model, protocol and the value it fixes."""

    runtime_id: str
    model_id: str
    api: str
    parallel_tool_calls: bool


def lock_surface(root: HitchRoot, request: RunRequest) -> LockSurface:
    """The surface of the lock ``request`` asks for, starting nothing: its sealed lock's, or (not sealed yet) what
    the lock of its model will claim (the parser's parallel tool calls; every lock of this version is Responses)."""
    if request.inference_id:
        lock = load_sealed_lock(root, request.inference_id)
        return LockSurface(lock.runtime_id, lock.model_id, lock.protocol.api, lock.protocol.parallel_tool_calls)
    manifest = resolve_model(root, str(request.model))
    parallel = claims_parallel_tool_calls(manifest.chat_template.tool_call_parser)
    return LockSurface(get_runtime(str(request.runtime)).runtime_id, manifest.model_id, "responses", parallel)


def _unsupported(harness: str, why: str, **details: object) -> HitchError:
    return HitchError("inference_harness_unsupported", f"harness {harness!r} {why}", {"harness": harness, **details})


def admit_harness(root: HitchRoot, request: RunRequest) -> HarnessCompatibilityProfileV1 | None:
    """The harness's passing profile (None: it needs none); ``inference_harness_unsupported`` otherwise."""
    harness = request.harness
    if harness is None:
        return None
    if harness == "model-call":
        surface = lock_surface(root, request)
        if surface.api != "responses":
            raise _unsupported(harness, "needs a Responses lock", api=surface.api)
        return None
    if harness == "codex":
        kind: Literal["codex", "harbor-agent"] = "codex"
    elif harness.startswith(HARBOR_PREFIX) and len(harness) > len(HARBOR_PREFIX):
        if harness.removeprefix(HARBOR_PREFIX) in NO_MODEL_AGENTS:
            return None
        kind = "harbor-agent"
    else:
        raise _unsupported(harness, "is not supported", choices=_CHOICES)
    if request.certifying:  # the run is how its profile gets recorded (pytest certify); run.json says so
        return None
    claim = request.harness_artifact
    if claim is None:
        raise _unsupported(harness, "names no artifact (harness_artifact), so no compatibility profile can be looked up")
    if kind == "harbor-agent":
        agent = harness.removeprefix(HARBOR_PREFIX)
        named = claim.artifact.partition(":")[2].partition("#")[0]
        if not claim.artifact.startswith("harbor@") or named != agent:
            raise _unsupported(harness, f"is not the agent its artifact names ({claim.artifact})", artifact=claim.artifact)
    surface = lock_surface(root, request)
    key = HarnessKeyV1(
        harness=kind,
        artifact=claim.artifact,
        version=claim.version,
        runtime_id=surface.runtime_id,
        model_profile=surface.model_id,
        protocol=claim.protocol,
    )
    if kind == "codex":  # what Codex always sends, checked even before its profile is looked up
        require_lock_values(key, CODEX_FIELDS, surface.parallel_tool_calls)
    profile = ProfileStore(root).require_passing(key, request.engine)
    require_lock_values(key, profile.fields, surface.parallel_tool_calls)
    return profile
