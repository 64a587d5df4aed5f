"""Who verifies a Harbor evaluation's trials, and from where (spec §11.1): the verifier is a role of its own.

hitch serves the candidate's model locally; it never redirects a verifier's (grader's, judge's) credentials or
model. A Harbor task hands its verifier what ``[verifier] env`` in ``task.toml`` names, resolved from the host's
environment (``${VAR}`` / ``${VAR:-default}``, Harbor's ``resolve_env_vars``). From that, per task
(:func:`task_verifier`):

- ``role``: ``model-judge`` when the verifier is handed a credential (a key whose name Harbor itself treats as
  sensitive: KEY, SECRET, TOKEN, PASSWORD, CREDENTIAL, AUTH) — it calls a model of its own; else ``tests``
  (the task's test script alone scores the trial);
- ``locality``: ``local`` for a ``tests`` verifier; ``remote-or-unknown`` for a model judge, whose model hitch
  neither serves nor knows;
- the names (never the values) of its credential variables, and the network mode it declares.

:func:`verifiers_of` reads every task before anything starts and fails early,
``eval_verifier_credentials_missing``, when a verifier needs a host variable (a template without a default)
that is not set — Harbor would otherwise fail only at verification, after the agent and the model ran. The
evaluation record claims ``offline`` only when the candidate and every verifier are local.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.contracts.evaluation import TaskVerifierV1
from harness.errors import HitchError

__all__ = ["task_verifier", "verifiers_of"]

_SENSITIVE = re.compile(r"(KEY|SECRET|TOKEN(?!S)|PASSWORD|CREDENTIAL|AUTH)", re.IGNORECASE)  # as harbor.utils.env's
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")  # as harbor.utils.env's: ${VAR} or ${VAR:-default}


def _verifier_table(task: Path) -> dict[str, object]:
    path = task / "task.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HitchError("usage_error", f"{path} is not a readable Harbor task.toml", {"path": str(path)}) from exc
    table = data.get("verifier", {})
    return table if isinstance(table, dict) else {}


def task_verifier(task: Path, environ: Mapping[str, str]) -> tuple[TaskVerifierV1, list[str]]:
    """The verifier of ``task`` and the host variables it needs that ``environ`` lacks (names only)."""
    table = _verifier_table(task)
    env = table.get("env", {})
    env = env if isinstance(env, dict) else {}
    credentials = sorted(str(key) for key in env if _SENSITIVE.search(str(key)))
    missing = []
    for value in env.values():
        match = _TEMPLATE.fullmatch(str(value))
        if match is not None and match.group(2) is None and match.group(1) not in environ:
            missing.append(match.group(1))
    judge = bool(credentials)
    network = table.get("network_mode")
    verifier = TaskVerifierV1(
        task=task.name,
        role="model-judge" if judge else "tests",
        locality="remote-or-unknown" if judge else "local",
        credential_env=credentials,
        network_mode=str(network) if network is not None else None,
    )
    return verifier, sorted(set(missing))


def verifiers_of(tasks: Sequence[Path], environ: Mapping[str, str]) -> list[TaskVerifierV1]:
    """Every task's verifier; ``eval_verifier_credentials_missing`` (names, never values) before anything starts."""
    found: list[TaskVerifierV1] = []
    missing: dict[str, list[str]] = {}
    for task in tasks:
        verifier, lacks = task_verifier(task, environ)
        found.append(verifier)
        if lacks:
            missing[task.name] = lacks
    if missing:
        names = sorted({name for lacks in missing.values() for name in lacks})
        raise HitchError(
            "eval_verifier_credentials_missing",
            f"the tasks' verifiers need {', '.join(names)} from this environment, and it is not set; hitch never "
            "hands a verifier the local model in their place",
            {"missing": missing},
        )
    return found
