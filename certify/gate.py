"""What ``certified`` needs beyond every required check passing (§10.3, §15.4), and the way there in actions.

**The release gate** (:data:`RELEASE_GATE`): on a real engine the level is ``certified`` only when the agents
ran as a coding agent uses the endpoint — a Codex run on the real engine whose model made at least two tool
round trips and changed a file (``agents.codex.real_tool_loop``), and Harbor trials on the real engine
(``agents.harbor.real_model``). A gate check that was skipped, did not run, or whose details fall short (the
model cannot drive a tool loop) caps the level at ``provisional``; the reason says which and why, in words.

**The way to certified** (:func:`actions`): each reason that keeps a real-engine entry from ``certified``
(the doctor's platform reasons, the runtime's, the gate's) as the action that would remove it here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RELEASE_GATE", "Gate", "actions", "gate_reasons"]


@dataclass(frozen=True)
class Gate:
    check: str
    needs: str  # what certified needs, in words
    short: Callable[[Mapping[str, Any]], str | None]  # why a passed check's details fall short (None: shown)
    action: str  # what to do here when it is not shown


def _loop_short(details: Mapping[str, Any]) -> str | None:
    trips, changed = details.get("tool_round_trips"), details.get("file_changed")
    if isinstance(trips, int) and trips >= 2 and changed is True:
        return None
    change = "changed the file" if changed is True else "left the file unchanged"
    return f"the model made {trips if isinstance(trips, int) else 'no'} tool round trip(s) and {change}"


def _shown(details: Mapping[str, Any]) -> str | None:
    return None


RELEASE_GATE = (
    Gate(
        "agents.codex.real_tool_loop",
        "a Codex run on the real engine whose model makes at least 2 tool round trips and changes a file",
        _loop_short,
        "certify a model that drives Codex's tool loop (at least 2 tool calls that change a file), with Codex "
        "installed (make codex)",
    ),
    Gate(
        "agents.harbor.real_model",
        "Harbor trials on the real engine",
        _shown,
        "run with Docker and Harbor present (make setup installs Harbor and builds its trial image)",
    ),
)


def gate_reasons(declared: Mapping[str, Any], results: Mapping[str, Any], engine: str, device: str) -> list[tuple[str, str]]:
    """(reason, action) for every gate item a real engine's session did not show (empty: the gate holds).
    ``declared``: check id -> :class:`certify.registry.Check`; ``results``: id -> :class:`certify.evaluate.CheckResult`."""
    out: list[tuple[str, str]] = []
    for gate in RELEASE_GATE:
        spec, result = declared.get(gate.check), results.get(gate.check)
        if spec is None or not spec.applies(engine, device):
            why = "it is not declared for this engine and device"
        elif result is not None and result.status == "not_applicable":
            why = f"the model cannot: {result.details.get('not_applicable')}"
        elif result is None or result.status != "passed":
            status = "did not run" if result is None else result.status
            reason = str((result.details if result is not None else {}).get("reason") or "").split("\n", 1)[0]
            why = f"{gate.check} {status}" + (f": {reason}" if reason else "")
        else:
            short = gate.short(result.details)
            if short is None:
                continue
            why = short
        out.append((f"not certified without {gate.needs}: {why}", gate.action))
    return out


# doctor / runtime reason (its start) -> the action that removes it on this machine
_ACTIONS: tuple[tuple[str, str], ...] = (
    ("CPU lacks AMX", "run on an x86_64 CPU with Intel AMX (4th-generation Xeon or later): the SGLang CPU engine needs it"),
    ("host architecture is", "run on an x86_64 host"),
    ("no pinned SGLang CPU image", "pin the official SGLang CPU image in the local Docker engine (hitch runtime pin)"),
    ("no pinned SGLang CUDA image", "pin the SGLang CUDA image (hitch runtime pin), or use the CUDA python-env runtime"),
    ("Docker has no 'nvidia' runtime", "configure the NVIDIA Container Toolkit for Docker"),
    ("Docker", "start a Docker engine this user can reach"),
    ("NVIDIA driver", "install an NVIDIA driver >= 580"),
    ("no NVIDIA", "run on a machine with an NVIDIA GPU"),
    ("no GPU with compute capability", "run on a GPU with compute capability 7.5 or later"),
    ("runtime ", "certify with a pinned certifiable runtime from the catalog (not the generic-CPU shim)"),
)


def actions(platform_reasons: list[str], runtime_reasons: list[str], gate: list[tuple[str, str]]) -> list[str]:
    """The shortest way to ``certified`` here: one action per distinct reason, in the order given."""
    out: list[str] = []
    for reason in [*platform_reasons, *runtime_reasons]:
        action = next((a for start, a in _ACTIONS if reason.startswith(start)), f"resolve: {reason}")
        if action not in out:
            out.append(action)
    for _, action in gate:
        if action not in out:
            out.append(action)
    return out
