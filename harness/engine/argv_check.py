"""The compiled command line against SGLang's own parser and resolution, in an installed runtime's venv.

The engine adapter compiles a lock into flags and an environment (``argv.py``, ``environment.py``) and
expects ``/server_info`` to echo what it set (``verify.py``). Nothing here trusts that SGLang reads them the
same way: :func:`read_with_sglang` runs ``sglang_args_runner.py`` (SGLang's ``ServerArgs`` parser, its
``--config`` merge, its resolution pipeline) once for any number of :class:`ArgvCase`\\ s, in the venv of a
runtime that ships the same SGLang; :func:`argv_problems` names every flag SGLang does not have, every command
line its parser refuses, every field readiness would wait for that SGLang does not echo or echoes with another
value, and every ``SGLANG_*`` variable SGLang does not read; :func:`require_accepted` raises
``inference_argv_rejected`` with them.

A CUDA lock is read by the generic-CPU runtime's SGLang (the same ``sglang==0.5.23`` wheel as the CUDA
runtime's): parsing and resolution need no GPU where the command line sets every value resolution would
otherwise size from the device. The engine keys never leave the runner: it returns their sha256.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from harness.contracts.base import Record, parse_record
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.engine.sglang import EngineLaunch
from harness.engine.verify import SCHEDULER_INFO_FIELDS, server_info_mismatches
from harness.errors import HitchError
from harness.ids import sha256_hex
from harness.paths import HitchRoot
from harness.runtimes import InstalledRuntime, installed_runtime, load_catalog

__all__ = [
    "RUNNER_PATH",
    "ArgvCase",
    "ArgvReadingV1",
    "SglangArgvReportV1",
    "argv_problems",
    "case_from_launch",
    "parser_runtime",
    "read_with_sglang",
    "require_accepted",
]

RUNNER_PATH = Path(__file__).with_name("sglang_args_runner.py")
SECRET_FIELDS = ("api_key", "admin_api_key")
# SGLANG_* variables SGLang reads with os.getenv instead of its registry (platform detection: ``is_cpu()``).
_RAW_ENV_READS = frozenset({"SGLANG_USE_CPU_ENGINE"})


class EnvReadingV1(Record):
    registered: bool
    value: Any = None


class ArgvReadingV1(Record):
    """What SGLang made of one command line (see ``sglang_args_runner.py``)."""

    name: str
    unknown_flags: list[str]
    dests: dict[str, str]
    error: str | None
    parsed: dict[str, Any] | None
    resolved: dict[str, Any] | None
    resolve_error: str | None
    env: dict[str, EnvReadingV1] = Field(default_factory=dict)


class SglangArgvReportV1(Record):
    versions: dict[str, str]
    server_args_fields: list[str]
    cases: list[ArgvReadingV1]


@dataclass(frozen=True)
class ArgvCase:
    """One compiled launch: its flags (no executable), its environment, the ``/server_info`` values readiness
    will require, and the sha256 of each secret the ``--config`` file must deliver."""

    name: str
    flags: list[str]
    env: dict[str, str]
    expected: dict[str, Any]
    secret_digests: dict[str, str] = field(default_factory=dict)


def case_from_launch(name: str, launch: EngineLaunch) -> ArgvCase:
    """The case of a prepared launch: exactly what a launcher would start and readiness would verify."""
    flags = launch.spec.argv[len(launch.program.argv) :]
    digests = dict(zip(SECRET_FIELDS, ("sha256:" + sha256_hex(k.encode()) for k in launch.keys.values()), strict=True))
    return ArgvCase(name, list(flags), dict(launch.spec.env), dict(launch.expected), digests)


def parser_runtime(root: HitchRoot, manifest: InferenceRuntimeManifestV1) -> InstalledRuntime | None:
    """An installed runtime whose SGLang is ``manifest``'s (the runtime itself first), or None."""
    same = [manifest] + [
        m
        for m in load_catalog()
        if m.runtime_id != manifest.runtime_id and (m.engine, m.engine_version) == (manifest.engine, manifest.engine_version)
    ]
    for candidate in same:
        try:
            found = installed_runtime(root, candidate)
        except HitchError:
            continue  # an altered install is never run
        if found is not None:
            return found
    return None


def read_with_sglang(
    runtime: InstalledRuntime, cases: Sequence[ArgvCase], *, resolve: bool = True, timeout_s: float = 600.0
) -> SglangArgvReportV1:
    """One run of the reader in ``runtime``'s venv for every case (importing SGLang takes ~10-20 s)."""
    request = {
        "cases": [{"name": c.name, "argv": c.flags, "env": c.env} for c in cases],
        "resolve": resolve,
        "secret_fields": list(SECRET_FIELDS),
    }
    proc = subprocess.run(
        # -P: the runner's folder (this package, which has a ``sglang.py``) is not put on sys.path
        [str(runtime.python), "-P", str(RUNNER_PATH)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=runtime.launch_environ(),
        timeout=timeout_s,
        check=False,
    )
    try:
        data = json.loads(proc.stdout) if proc.returncode == 0 else None
    except ValueError:
        data = None
    if data is None:
        raise HitchError(
            "inference_runtime_unavailable",
            f"runtime {runtime.manifest.name}: SGLang's argument reader failed (exit {proc.returncode})",
            {"runtime": runtime.manifest.name, "stderr_tail": proc.stderr.splitlines()[-20:]},
        )
    return parse_record(SglangArgvReportV1, data, "internal_error")


def _case_problems(case: ArgvCase, reading: ArgvReadingV1, fields: set[str], version: str) -> list[str]:
    where = f"{case.name}:"
    problems = [f"{where} {flag} is not a flag of SGLang {version}" for flag in reading.unknown_flags]
    if reading.error is not None or reading.parsed is None:
        return [*problems, f"{where} SGLang's parser refuses the command line: {reading.error}"]
    expected = {k: v for k, v in case.expected.items() if k not in SCHEDULER_INFO_FIELDS}
    for name in expected:
        if name not in fields:
            problems.append(f"{where} {name} is not a ServerArgs field: /server_info never echoes it")
    for flag, dest in reading.dests.items():
        if flag != "--config" and dest not in expected:
            problems.append(f"{where} {flag} sets {dest}, which readiness does not expect back")
    checked = {k: v for k, v in expected.items() if k in fields}
    for m in server_info_mismatches(reading.parsed, checked):
        problems.append(f"{where} {m['field']} parses to {m['actual']!r}, the lock means {m['expected']!r}")
    if reading.resolve_error is not None:
        problems.append(f"{where} SGLang's resolution fails: {reading.resolve_error}")
    elif reading.resolved is not None:
        for m in server_info_mismatches(reading.resolved, checked):
            problems.append(
                f"{where} {m['field']} resolves to {m['actual']!r} (what /server_info echoes), the lock means {m['expected']!r}"
            )
    for name, digest in case.secret_digests.items():
        if reading.parsed.get(name) != digest:
            problems.append(f"{where} {name} does not arrive through --config")
    for name, env in reading.env.items():
        if not env.registered and name not in _RAW_ENV_READS:
            problems.append(f"{where} SGLang {version} does not read the environment variable {name}")
    return problems


def argv_problems(report: SglangArgvReportV1, cases: Sequence[ArgvCase]) -> list[str]:
    """Every way SGLang's reading of ``cases`` differs from what the engine adapter means (empty: none)."""
    readings = {r.name: r for r in report.cases}
    version = report.versions.get("sglang", "?")
    fields = set(report.server_args_fields)
    problems: list[str] = []
    for case in cases:
        reading = readings.get(case.name)
        if reading is None:
            problems.append(f"{case.name}: SGLang's reader did not answer for it")
            continue
        problems += _case_problems(case, reading, fields, version)
    return problems


def require_accepted(report: SglangArgvReportV1, cases: Sequence[ArgvCase]) -> None:
    """Raise ``inference_argv_rejected`` naming every problem :func:`argv_problems` finds."""
    problems = argv_problems(report, cases)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise HitchError(
            "inference_argv_rejected",
            f"SGLang {report.versions.get('sglang', '?')} does not read the command line as the lock means it: {shown}",
            {"problems": problems, "sglang": report.versions.get("sglang")},
        )
