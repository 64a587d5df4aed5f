"""The in-toto Statement v1 of a certification result: building it and checking its shape.

A statement is ``{"_type", "subject", "predicateType", "predicate"}`` and nothing else. Subjects are the
identities the result is about (runtime digest, model_id, lock digest), each ``{"name", "digest":
{"sha256": hex}}`` and sorted by name; the predicate is the evaluator's result (DESIGN §6). The checks
here are shared by signing (a defect is the caller's input: ``catalog_entry_invalid``) and verification
(a defect means the entry is not to be trusted: ``catalog_signature_invalid``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from harness.contracts.certification import PREDICATE_SCHEMA_VERSION, CertificationResultV1
from harness.errors import HitchError

__all__ = [
    "LEVELS",
    "PREDICATE_TYPE",
    "PREDICATE_TYPES",
    "STATEMENT_TYPE",
    "SUBJECT_NAMES",
    "build_statement",
    "check_statement",
    "subjects_from_predicate",
    "subjects_of",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# predicateType per predicate schema_version: new entries are v4 (schema 4: the not_applicable check status and
# the reproduction margins); entries signed as v2 or v3 stay verifiable and readable
PREDICATE_TYPES = {
    "2": "https://hitch.dev/certification/v2",
    "3": "https://hitch.dev/certification/v3",
    "4": "https://hitch.dev/certification/v4",
}
PREDICATE_TYPE = PREDICATE_TYPES[PREDICATE_SCHEMA_VERSION]
LEVELS = ("certified", "provisional", "contract", "failed")

# predicate field -> subject name, for the three identities DESIGN §6 names as subjects
SUBJECT_NAMES = {"runtime_id": "runtime", "model_id": "model", "inference_id": "inference_lock"}

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SUBJECT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")
_STATEMENT_KEYS = {"_type", "subject", "predicateType", "predicate"}


class _Defect(Exception):
    """A shape defect; the caller decides which error code it becomes."""


def _hex_of(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _Defect(f"{where} must be a string digest")
    hex_part = value.removeprefix("sha256:")
    if not _HEX64.match(hex_part):
        raise _Defect(f"{where} is not a sha256 digest (sha256:<64 lowercase hex>)")
    return hex_part


def _check_predicate(predicate: object) -> dict[str, Any]:
    """The predicate is a :class:`CertificationResultV1` exactly (the one typed shape; unknown fields refused);
    returns it as the record serialises it."""
    try:
        return CertificationResultV1.model_validate(predicate).to_json_dict()
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        count = exc.error_count()
        raise _Defect(f"predicate is not a CertificationResultV1: {where}: {first['msg']} ({count} problem(s))") from None


def _check_subjects(subjects: object) -> None:
    if not isinstance(subjects, list) or not subjects:
        raise _Defect("subject must be a non-empty list")
    names: set[str] = set()
    for i, item in enumerate(subjects):
        if not isinstance(item, dict) or set(item) != {"name", "digest"}:
            raise _Defect(f"subject[{i}] must have exactly name and digest")
        name, digest = item["name"], item["digest"]
        if not isinstance(name, str) or not _SUBJECT_NAME.match(name):
            raise _Defect(f"subject[{i}].name is not a valid name")
        if name in names:
            raise _Defect(f"subject name {name!r} appears twice")
        names.add(name)
        if not isinstance(digest, dict) or "sha256" not in digest:
            raise _Defect(f"subject[{i}].digest must hold sha256")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in digest.items()):
            raise _Defect(f"subject[{i}].digest values must be strings")
        if not _HEX64.match(digest["sha256"]):
            raise _Defect(f"subject[{i}].digest.sha256 is not 64 lowercase hex")


def _check_consistency(subjects: list[dict[str, Any]], predicate: dict[str, Any]) -> None:
    """A standard subject and the predicate field it stands for must name the same digest."""
    by_name = {s["name"]: s["digest"]["sha256"] for s in subjects}
    for field, name in SUBJECT_NAMES.items():
        value = predicate.get(field)
        if name in by_name and (not isinstance(value, str) or value.removeprefix("sha256:") != by_name[name]):
            raise _Defect(f"subject {name} does not match predicate.{field}")


def _check(statement: object) -> None:
    if not isinstance(statement, dict):
        raise _Defect("statement must be a JSON object")
    if set(statement) != _STATEMENT_KEYS:
        raise _Defect(f"statement must have exactly the fields {sorted(_STATEMENT_KEYS)}")
    if statement["_type"] != STATEMENT_TYPE:
        raise _Defect(f"_type must be {STATEMENT_TYPE}")
    if statement["predicateType"] not in PREDICATE_TYPES.values():
        raise _Defect(f"predicateType must be one of {sorted(PREDICATE_TYPES.values())}")
    _check_subjects(statement["subject"])
    record = _check_predicate(statement["predicate"])
    if statement["predicateType"] != PREDICATE_TYPES[record["schema_version"]]:
        raise _Defect(f"predicateType {statement['predicateType']} does not match schema_version {record['schema_version']}")
    _check_consistency(statement["subject"], statement["predicate"])


def check_statement(statement: object, code: str) -> dict[str, Any]:
    """Return ``statement`` if it is a well-formed certification statement, else raise ``code``."""
    try:
        _check(statement)
    except _Defect as exc:
        raise HitchError(code, f"malformed statement: {exc}", {"reason": str(exc)}) from None
    assert isinstance(statement, dict)
    return statement


def subjects_from_predicate(predicate: Mapping[str, Any]) -> dict[str, str]:
    """The standard subjects (runtime, model, inference_lock) from those identity fields of the predicate
    that hold a sha256 digest (a run that failed before it had a lock has fewer; none at all cannot be signed)."""
    out: dict[str, str] = {}
    for field, name in SUBJECT_NAMES.items():
        value = predicate.get(field)
        if isinstance(value, str) and _HEX64.match(value.removeprefix("sha256:")):
            out[name] = value
    return out


def subjects_of(statement: Mapping[str, Any]) -> dict[str, str]:
    """``{name: "sha256:<hex>"}`` of a (checked) statement's subjects."""
    return {s["name"]: "sha256:" + s["digest"]["sha256"] for s in statement["subject"]}


def build_statement(predicate: dict[str, Any], subjects: dict[str, str]) -> dict[str, Any]:
    """An in-toto Statement v1 about ``subjects`` (name -> ``sha256:<hex>`` or bare hex).

    Raises ``catalog_entry_invalid`` for a predicate or subject that could never verify.
    """
    try:
        if not isinstance(subjects, dict) or not subjects:
            raise _Defect("at least one subject is needed")
        subject = [{"name": name, "digest": {"sha256": _hex_of(subjects[name], f"subject {name}")}} for name in sorted(subjects)]
    except _Defect as exc:
        raise HitchError("catalog_entry_invalid", str(exc), {"reason": str(exc)}) from None
    try:
        record = _check_predicate(predicate)  # what is signed is the record's own serialisation, defaults included
    except _Defect as exc:
        raise HitchError("catalog_entry_invalid", f"malformed statement: {exc}", {"reason": str(exc)}) from None
    predicate_type = PREDICATE_TYPES[record["schema_version"]]
    statement = {"_type": STATEMENT_TYPE, "subject": subject, "predicateType": predicate_type, "predicate": record}
    return check_statement(statement, "catalog_entry_invalid")
