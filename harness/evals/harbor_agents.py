"""Which Harbor agents may run on a local model: those with a passing compatibility profile (spec §3, §10.3).

As ``hitch run`` admits only profiled harnesses (:mod:`harness.app.profiles`), ``hitch eval harbor run
--agent X`` admits an agent only when the certification recorded a passing compatibility profile for it,
for this runtime and model, on this engine (``pytest certify -k agents.harbor`` records them); any other is
refused with ``inference_harness_unsupported`` before anything starts — no daemon request, no service, no
container. The rule, in :func:`require_agent`:

- an agent that calls no model (``oracle``, ``nop``) has nothing to be compatible with: it needs no profile;
- an agent hitch has no measured field table for (:data:`KNOWN_AGENTS`: what it sends and what the gateway
  does with each field) is refused at once, whatever is recorded: Harbor's installed agents (``codex``,
  ``claude-code``, ...) and any other ``module:Class``;
- a known agent needs a passing profile keyed by (:func:`agent_key`): the exact agent artifact — Harbor's
  version and the agent's name, and for a ``module:Class`` agent also the digest of its module file (found
  under the ``--agent-path`` folders), so an edited agent is a new artifact that needs certifying again —
  the runtime, the model and the protocol it speaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.app.profiles import HARBOR_SHELL_AGENT_FIELDS, HARBOR_TERMINUS_FIELDS, NO_MODEL_AGENTS, ProfileStore, result
from harness.app.requests import HarnessArtifactIn
from harness.contracts.agent_profile import FieldRuleV1, HarnessCompatibilityProfileV1, HarnessKeyV1
from harness.errors import HitchError
from harness.ids import digest_bytes
from harness.paths import HitchRoot

__all__ = [
    "KNOWN_AGENTS",
    "NO_MODEL_AGENTS",
    "SHELL_AGENT",
    "TERMINUS",
    "agent_artifact",
    "agent_key",
    "known_agent",
    "record_agent_result",
    "require_agent",
]

TERMINUS = "terminus-2"
SHELL_AGENT = "fixtures.harbor_agents.shell_agent:ShellAgent"


@dataclass(frozen=True)
class KnownAgent:
    protocol: Literal["chat-completions", "responses"]
    fields: tuple[FieldRuleV1, ...]


KNOWN_AGENTS: dict[str, KnownAgent] = {
    TERMINUS: KnownAgent("chat-completions", HARBOR_TERMINUS_FIELDS),
    SHELL_AGENT: KnownAgent("chat-completions", HARBOR_SHELL_AGENT_FIELDS),
}


def _unsupported(agent: str, why: str, **details: object) -> HitchError:
    return HitchError(
        "inference_harness_unsupported",
        f"Harbor agent {agent!r} {why}",
        {"agent": agent, "profiled_agents": sorted(KNOWN_AGENTS), "no_model_agents": sorted(NO_MODEL_AGENTS), **details},
    )


def known_agent(agent: str) -> KnownAgent | None:
    """The agent's field table; None for an agent that calls no model; refused for any other (no table)."""
    if agent in NO_MODEL_AGENTS:
        return None
    known = KNOWN_AGENTS.get(agent)
    if known is None:
        raise _unsupported(agent, "has no measured field table, so no compatibility profile can exist for it")
    return known


def _module_file(agent: str, agent_paths: Sequence[Path]) -> Path:
    module = agent.partition(":")[0]
    relative = Path(*module.split("."))
    for folder in agent_paths:
        for candidate in (folder / relative.with_suffix(".py"), folder / relative / "__init__.py"):
            if candidate.is_file():
                return candidate
    raise _unsupported(
        agent, "is a module:Class whose module is under none of the --agent-path folders", paths=[str(p) for p in agent_paths]
    )


def agent_artifact(agent: str, harbor_version: str, agent_paths: Sequence[Path]) -> HarnessArtifactIn:
    """The exact artifact of ``agent`` as Harbor ``harbor_version`` runs it (what its profile is keyed by)."""
    known = known_agent(agent)
    if known is None:
        raise _unsupported(agent, "calls no model: it has no compatibility profile")
    artifact = f"harbor@{harbor_version}:{agent}"
    if ":" in agent:  # module:Class: the code itself is the artifact
        artifact += "#" + digest_bytes(_module_file(agent, agent_paths).read_bytes())
    return HarnessArtifactIn(artifact=artifact, version=harbor_version, protocol=known.protocol)


def agent_key(agent: str, harbor_version: str, runtime_id: str, model_id: str, agent_paths: Sequence[Path]) -> HarnessKeyV1:
    """The profile key of ``agent`` as Harbor ``harbor_version`` runs it against this runtime and model."""
    claim = agent_artifact(agent, harbor_version, agent_paths)
    return HarnessKeyV1(
        harness="harbor-agent",
        artifact=claim.artifact,
        version=claim.version,
        runtime_id=runtime_id,
        model_profile=model_id,
        protocol=claim.protocol,
    )


def require_agent(
    root: HitchRoot,
    agent: str,
    harbor_version: str,
    runtime_id: str,
    model_id: str,
    engine: str,
    agent_paths: Sequence[Path],
) -> HarnessCompatibilityProfileV1 | None:
    """The agent's passing profile for this engine (None: it calls no model); else ``inference_harness_unsupported``."""
    if known_agent(agent) is None:
        return None
    return ProfileStore(root).require_passing(agent_key(agent, harbor_version, runtime_id, model_id, agent_paths), engine)


def record_agent_result(
    root: HitchRoot,
    agent: str,
    key: HarnessKeyV1,
    check_id: str,
    engine: str,
    device: str,
    passed: bool,
    **details: str | int | float | bool | None,
) -> HarnessCompatibilityProfileV1:
    """The certification's record of one check of ``agent`` (its key from :func:`agent_key`)."""
    return ProfileStore(root).record(key, KNOWN_AGENTS[agent].fields, result(check_id, engine, device, passed, **details))
