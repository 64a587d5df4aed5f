"""``hitch --version`` and ``hitch version [--json]``: the package version, the commit it runs from and the
schema versions of what it writes (the CLI's ``--json`` envelope and each exported record)."""

from __future__ import annotations

from typing import Any

from harness.cli.output import JSON_SCHEMA_VERSION, JsonOpt, cli_command, emit
from harness.project import project_commit, project_version

__all__ = ["print_version", "version_cmd", "version_payload"]


def version_payload() -> dict[str, Any]:
    from harness.contracts import SCHEMA_RECORDS  # only here: the records' versions cost pydantic's import

    records = {}
    for record in SCHEMA_RECORDS:
        field = record.model_fields.get("schema_version")
        records[record.__name__] = str(field.default) if field is not None else None
    return {
        "kind": "version",
        "version": project_version(),
        "commit": project_commit(),
        "cli_json_schema_version": JSON_SCHEMA_VERSION,
        "record_schema_versions": records,
    }


def _human(payload: dict[str, Any]) -> str:
    records = ", ".join(f"{name} {v}" for name, v in payload["record_schema_versions"].items())
    return "\n".join(
        [
            f"hitch {payload['version']}",
            f"commit: {payload['commit']}",
            f"--json schema_version: {payload['cli_json_schema_version']}",
            f"record schema versions: {records}",
        ]
    )


def print_version(as_json: bool = False) -> None:
    payload = version_payload()
    emit(as_json, payload, _human(payload))


@cli_command
def version_cmd(as_json: JsonOpt = False) -> None:
    """The version, commit and schema versions (as ``hitch --version``)."""
    print_version(as_json)
