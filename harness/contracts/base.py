"""The one base for every record: strict (unknown fields refused), frozen, versioned."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from harness.errors import HitchError

__all__ = ["Record", "Sha256", "parse_record"]

T = TypeVar("T", bound="Record")

Sha256 = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]


class Record(BaseModel):
    """Base of all records that cross a process or disk boundary."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, validate_default=True)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def parse_record(cls: type[T], data: Any, code: str) -> T:
    """Validate ``data`` as ``cls``; failures become ``HitchError(code)`` naming the bad fields."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        problems = [
            {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"], "type": err["type"]}
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise HitchError(code, f"invalid {cls.__name__}: {len(problems)} problem(s)", {"problems": problems}) from exc
