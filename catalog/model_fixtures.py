"""The committed catalog of model fixtures (``catalog/model_fixtures.toml``): a strict loader.

Each entry pins a fixture's ``model_id`` and states its facts (name, architecture, parameter count,
license, source) and the behaviours it cannot show. Any problem is ``model_fixture_catalog_invalid``
with the offending fields.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from harness.contracts.base import Record
from harness.contracts.model_fixture import ModelFixtureEntry
from harness.errors import HitchError

__all__ = ["MODEL_FIXTURES_PATH", "fixture_by_key", "fixture_for_model_id", "load_model_fixtures"]

MODEL_FIXTURES_PATH = Path(__file__).with_name("model_fixtures.toml")


class _Catalog(Record):
    fixture: list[ModelFixtureEntry]


def _fail(message: str, details: dict[str, object]) -> HitchError:
    return HitchError("model_fixture_catalog_invalid", message, details)


def load_model_fixtures(path: Path | None = None) -> list[ModelFixtureEntry]:
    """Every fixture of the catalog, in file order."""
    path = path or MODEL_FIXTURES_PATH
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(f"cannot read the model fixture catalog {path}: {exc.strerror}", {"path": str(path)}) from exc
    except tomllib.TOMLDecodeError as exc:
        raise _fail(f"the model fixture catalog {path} is not valid TOML: {exc}", {"path": str(path)}) from exc
    try:
        entries = _Catalog.model_validate(raw).fixture
    except ValidationError as exc:
        problems = [
            {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]}
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise _fail(f"invalid model fixture catalog {path}: {len(problems)} problem(s)", {"problems": problems}) from exc
    for field in ("key", "ref", "model_id"):
        values = [getattr(e, field) for e in entries]
        dupes = sorted({v for v in values if values.count(v) > 1})
        if dupes:
            raise _fail(f"the model fixture catalog repeats a {field}", {field: dupes})
    return entries


def fixture_by_key(key: str, path: Path | None = None) -> ModelFixtureEntry:
    """The fixture named ``key`` (``tiny``, ``smollm2``) or its ``ref`` (``fixture:tiny``)."""
    entries = load_model_fixtures(path)
    for entry in entries:
        if key in (entry.key, entry.ref):
            return entry
    raise HitchError("usage_error", f"no model fixture {key!r}", {"fixture": key, "known": [e.key for e in entries]})


def fixture_for_model_id(model_id: str, path: Path | None = None) -> ModelFixtureEntry | None:
    """The fixture whose pinned ``model_id`` this is, if any."""
    return next((e for e in load_model_fixtures(path) if e.model_id == model_id), None)
