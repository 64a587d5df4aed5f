"""Harness compatibility profiles: the measured field tables and the per-root store of certified results.

The application layer's admission rule for every harness against a lock (``hitch run``'s model-call and Codex,
``hitch eval``'s Harbor agents): both entry points ask it, so it lives below them.

Owns :data:`CODEX_FIELDS` (what Codex 0.171.0 sends and what the gateway + SGLang 0.5.23 do with each field,
measured through the gateway; see the module docstring of :mod:`gateway.lock_check`; the table is data,
``field_rules.json`` beside this module, as are :data:`MODEL_CALL_FIELDS` and the Harbor agents' tables,
:data:`HARBOR_TERMINUS_FIELDS` and :data:`HARBOR_SHELL_AGENT_FIELDS`, used by
:mod:`harness.evals.harbor_agents`), :func:`codex_key` / :func:`model_call_key`, :func:`require_lock_values`
(a rule's ``sends`` value against the lock's, e.g. Codex's ``parallel_tool_calls: true``), and
:class:`ProfileStore`, which keeps one JSON record per profile under ``<root>/inference/harness-profiles/`` (atomic writes).
:meth:`ProfileStore.require_passing` is the admission rule: a harness runs against a lock only when its
profile exists and every recorded result passed; otherwise ``inference_harness_unsupported``. ``model-call``
is the lock's own Responses text path (every lock of this version enables it), so it needs no recorded
profile; its key is still written into evidence.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from pydantic import Field, model_validator

from harness.contracts.agent_profile import FieldRuleV1, HarnessCompatibilityProfileV1, HarnessKeyV1, ProfileResultV1
from harness.contracts.base import Record, parse_record
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.ids import digest_json
from harness.paths import HitchRoot, atomic_write_json

__all__ = [
    "CODEX_FIELDS",
    "FIELD_RULES_PATH",
    "HARBOR_SHELL_AGENT_FIELDS",
    "HARBOR_TERMINUS_FIELDS",
    "MODEL_CALL_FIELDS",
    "MODEL_CALL_VERSION",
    "NO_MODEL_AGENTS",
    "ProfileStore",
    "codex_key",
    "codex_key_of",
    "model_call_key",
    "profile_id",
    "require_lock_values",
    "result",
]

MODEL_CALL_VERSION = "1"
NO_MODEL_AGENTS = frozenset({"oracle", "nop"})  # Harbor agents that call no model: nothing to be compatible with


FIELD_RULES_PATH = Path(__file__).with_name("field_rules.json")


class _FieldTables(Record):
    """The field tables as shipped in :data:`FIELD_RULES_PATH`, one per harness (validated on import)."""

    codex: tuple[FieldRuleV1, ...] = Field(min_length=1)
    model_call: tuple[FieldRuleV1, ...] = Field(min_length=1)
    harbor_terminus_2: tuple[FieldRuleV1, ...] = Field(min_length=1)
    harbor_shell_agent: tuple[FieldRuleV1, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_rule_per_field(self) -> Self:
        for name in type(self).model_fields:
            rules: tuple[FieldRuleV1, ...] = getattr(self, name)
            if len({r.field for r in rules}) != len(rules):
                raise ValueError(f"the {name} table has two rules for one field")
        return self


_TABLES = _FieldTables.model_validate_json(FIELD_RULES_PATH.read_bytes())
CODEX_FIELDS: tuple[FieldRuleV1, ...] = _TABLES.codex
MODEL_CALL_FIELDS: tuple[FieldRuleV1, ...] = _TABLES.model_call
HARBOR_TERMINUS_FIELDS: tuple[FieldRuleV1, ...] = _TABLES.harbor_terminus_2  # Harbor 0.25.0's terminus-2 (LiteLLM)
HARBOR_SHELL_AGENT_FIELDS: tuple[FieldRuleV1, ...] = _TABLES.harbor_shell_agent  # fixtures.harbor_agents.shell_agent


def profile_id(key: HarnessKeyV1) -> str:
    return digest_json(key.to_json_dict())


def codex_key(lock: InferenceLockV1, artifact: str, version: str) -> HarnessKeyV1:
    return codex_key_of(lock.runtime_id, lock.model_id, artifact, version)


def codex_key_of(runtime_id: str, model_id: str, artifact: str, version: str) -> HarnessKeyV1:
    """The key before any lock is sealed: a preflight checks the profile before a service is acquired."""
    return HarnessKeyV1(
        harness="codex",
        artifact=artifact,
        version=version,
        runtime_id=runtime_id,
        model_profile=model_id,
        protocol="responses",
    )


def model_call_key(lock: InferenceLockV1) -> HarnessKeyV1:
    return HarnessKeyV1(
        harness="model-call",
        artifact=f"hitch:model-call@{MODEL_CALL_VERSION}",
        version=MODEL_CALL_VERSION,
        runtime_id=lock.runtime_id,
        model_profile=lock.model_id,
        protocol=lock.protocol.api,
    )


class ProfileStore:
    """One JSON file per profile under ``<root>/inference/harness-profiles/`` (sha256 hex names)."""

    def __init__(self, root: HitchRoot) -> None:
        self.dir = root.agent_profiles

    def _path(self, pid: str) -> Path:
        return self.dir / (pid.split(":", 1)[1] + ".json")

    def get(self, key: HarnessKeyV1) -> HarnessCompatibilityProfileV1 | None:
        path = self._path(profile_id(key))
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise HitchError("inference_harness_unsupported", f"unreadable harness profile {path}", {"path": str(path)}) from exc
        return parse_record(HarnessCompatibilityProfileV1, data, "inference_harness_unsupported")

    def record(
        self, key: HarnessKeyV1, fields: tuple[FieldRuleV1, ...], result: ProfileResultV1
    ) -> HarnessCompatibilityProfileV1:
        """Add ``result`` (replacing an older one of the same check, engine and device) and save."""
        old = self.get(key)
        kept = [
            r
            for r in (old.results if old else [])
            if (r.check_id, r.engine, r.device) != (result.check_id, result.engine, result.device)
        ]
        profile = HarnessCompatibilityProfileV1(profile_id=profile_id(key), key=key, fields=list(fields), results=[*kept, result])
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self._path(profile.profile_id), profile.to_json_dict())
        return profile

    def require_passing(self, key: HarnessKeyV1, engine: str | None = None) -> HarnessCompatibilityProfileV1:
        """The profile when every result passed and (given ``engine``) one of them ran on that engine."""
        profile = self.get(key)
        details = {"harness": key.harness, "artifact": key.artifact, "runtime_id": key.runtime_id, "model": key.model_profile}
        if profile is None or not profile.results:
            raise HitchError(
                "inference_harness_unsupported",
                f"{key.artifact} has no certified compatibility profile for this runtime and model; "
                "run `pytest certify -k agents` for it first",
                details,
            )
        if engine is not None and not any(r.engine == engine for r in profile.results):
            raise HitchError(
                "inference_harness_unsupported",
                f"{key.artifact} was never certified against the {engine} engine for this runtime and model",
                {**details, "engine": engine},
            )
        failed = sorted({r.check_id for r in profile.results if r.outcome != "passed"})
        if failed:
            raise HitchError(
                "inference_harness_unsupported",
                f"{key.artifact}'s compatibility profile has failed checks: {', '.join(failed)}",
                {**details, "failed": failed},
            )
        return profile


def require_lock_values(key: HarnessKeyV1, fields: Sequence[FieldRuleV1], parallel_tool_calls: bool) -> None:
    """The lock fixes some request fields the harness always sends (the gateway refuses any other value): a lock
    whose value differs refuses the harness now, before a run starts, never mid-run."""
    lock_values = {"parallel_tool_calls": parallel_tool_calls}
    for rule in fields:
        if rule.sends is None or rule.field not in lock_values or lock_values[rule.field] == rule.sends:
            continue
        want, have = json.dumps(rule.sends), json.dumps(lock_values[rule.field])
        raise HitchError(
            "inference_harness_unsupported",
            f"{key.artifact} always sends {rule.field}={want} and this lock claims {have} "
            "(the gateway would refuse every request with tools); use a model whose tool-call parser fits",
            {"harness": key.harness, "artifact": key.artifact, "field": rule.field, "sends": rule.sends, "lock": have},
        )


def result(check_id: str, engine: str, device: str, passed: bool, **details: str | int | float | bool | None) -> ProfileResultV1:
    """A result row stamped now."""
    return ProfileResultV1.model_validate(
        {
            "check_id": check_id,
            "engine": engine,
            "device": device,
            "outcome": "passed" if passed else "failed",
            "recorded_at": time.time(),
            "details": details,
        }
    )
