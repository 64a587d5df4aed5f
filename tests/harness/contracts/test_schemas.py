"""Committed JSON Schemas equal the generated ones; records are strict."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.contracts import SCHEMA_RECORDS, InferenceRuntimeManifestV1
from harness.schema_export import SCHEMA_DIR, generated_schemas


def test_committed_schemas_match_the_records() -> None:
    generated = generated_schemas()
    committed = {p.name: p.read_text() for p in SCHEMA_DIR.glob("*.schema.json")}
    assert set(committed) == set(generated), "run `make schemas` and commit docs/schemas"
    drifted = sorted(name for name, text in generated.items() if committed[name] != text)
    assert drifted == [], f"schemas drifted from the records: {drifted}; run `make schemas`"


@pytest.mark.parametrize("record", SCHEMA_RECORDS, ids=lambda r: r.__name__)
def test_every_record_forbids_unknown_fields(record: type) -> None:
    assert record.model_config.get("extra") == "forbid"
    assert record.model_json_schema().get("additionalProperties") is False


def test_runtime_package_is_discriminated_by_kind() -> None:
    base = {
        "runtime_id": "sha256:" + "a" * 64,
        "name": "x",
        "engine_version": "0.5.23",
        "engine_commit": "b" * 40,
        "backend": "cpu",
        "certifiable": False,
        "pinned": True,
    }
    oci = InferenceRuntimeManifestV1.model_validate({**base, "package": {"kind": "oci", "image": "i", "digest": None}})
    assert oci.package.kind == "oci"
    with pytest.raises(ValidationError):
        # a python-env field on an oci package is refused, never ignored
        InferenceRuntimeManifestV1.model_validate(
            {**base, "package": {"kind": "oci", "image": "i", "digest": None, "python": "3.11"}}
        )
