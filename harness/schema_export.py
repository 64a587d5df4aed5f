"""JSON Schemas of every record, generated into ``docs/schemas/`` (``python -m harness.schema_export``, ``make schemas``).

A tool above the records (it also exports records owned by ``harness.devices``), not part of ``harness.contracts``.

A test compares the committed files with freshly generated ones, so a record change
without regenerated schemas fails CI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from harness.contracts import SCHEMA_RECORDS
from harness.contracts.base import Record
from harness.devices import DoctorReportV1

__all__ = ["SCHEMA_DIR", "extra_records", "generated_schemas", "write_schemas"]

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "docs" / "schemas"


def extra_records() -> tuple[type[Record], ...]:
    """Records owned by other packages of harness that are printed or stored (e.g. the doctor report)."""

    return (DoctorReportV1,)


def _render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def generated_schemas() -> dict[str, str]:
    """File name → schema text for every exported record."""
    out: dict[str, str] = {}
    for record in (*SCHEMA_RECORDS, *extra_records()):
        out[f"{record.__name__}.schema.json"] = _render(record.model_json_schema(mode="validation"))
    return out


def write_schemas(target: Path = SCHEMA_DIR) -> list[Path]:
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in generated_schemas().items():
        path = target / name
        path.write_text(text)
        written.append(path)
    for stale in target.glob("*.schema.json"):
        if stale.name not in generated_schemas():
            stale.unlink()
    return written


if __name__ == "__main__":
    for p in write_schemas(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_DIR):
        print(p)
