"""Generation profiles: the sampling a lock is made with (``--generation NAME|FILE``).

Owns :data:`GENERATION_PROFILES`, the built-in profiles (each a name and a version; ``greedy`` is the default every
lock had before profiles existed, so a lock made without ``--generation`` keeps its inference id), and
:func:`generation_profile`, which reads what a user typed: a built-in name, or a JSON file holding one object of
the sampling fields (:class:`~harness.contracts.lock.SamplingV1`; a field left out keeps greedy's value, an unknown
key is refused). A mistyped name is ``usage_error`` with a did-you-mean; a file that is not there is
``usage_error`` "no such file: PATH"; a file that does not hold a profile is ``generation_profile_invalid`` naming
each bad field as written in the file. The budget (``max_output_tokens``) is not sampling: the context decides it.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError

from harness.contracts.base import Record
from harness.contracts.lock import SamplingV1
from harness.errors import HitchError
from harness.ids import digest_json

__all__ = [
    "DEFAULT_GENERATION",
    "GENERATION_PROFILES",
    "GenerationProfile",
    "GenerationSpec",
    "describe_sampling",
    "generation_profile",
]

_OPTION = "--generation"


class GenerationProfile(Record):
    """A named, versioned sampling: built in, or read from a file (its name is the path as given, its version the
    digest of its values)."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    source: Literal["built-in", "file"]
    sampling: SamplingV1

    def label(self) -> str:
        """How a person reads which profile a lock was made with: ``balanced v1``, ``file p.json (sha256:…)``."""
        if self.source == "file":
            return f"file {self.name} ({self.version[:19]}…)"
        return f"{self.name} v{self.version}"


def _builtin(name: str, version: str, **sampling: float) -> GenerationProfile:
    values: dict[str, float] = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
    values |= sampling
    return GenerationProfile(name=name, version=version, source="built-in", sampling=SamplingV1(seed=0, **values))


# The one table of built-in profiles. A profile's values never change under its version: a change is a new version.
GENERATION_PROFILES: dict[str, GenerationProfile] = {
    p.name: p
    for p in (
        _builtin("greedy", "1"),  # spec §6.2: temperature 0, top_p 1, no top-k, min_p 0, no repetition penalty, seed 0
        _builtin("balanced", "1", temperature=0.7, top_p=0.95),
        _builtin("creative", "1", temperature=1.0, top_p=0.95),
    )
}
DEFAULT_GENERATION = GENERATION_PROFILES["greedy"]


def generation_profile(spec: str) -> GenerationProfile:
    """The profile ``--generation SPEC`` names: a built-in name, else a JSON file (a value with a path separator or
    a ``.json`` suffix, or a file that exists)."""
    known = GENERATION_PROFILES.get(spec)
    if known is not None:
        return known
    path = Path(spec)
    if "/" in spec or spec.endswith(".json") or path.exists():
        return _from_file(spec, path)
    choices = sorted(GENERATION_PROFILES)
    close = difflib.get_close_matches(spec.lower(), choices, n=1, cutoff=0.5)
    message = f"{_OPTION} {spec} is not known; choose {'|'.join(choices)} or a JSON file" + (
        f" (did you mean {close[0]}?)" if close else ""
    )
    details: dict[str, Any] = {"option": _OPTION, "value": spec, "choices": choices}
    if close:
        details["did_you_mean"] = close[0]
    raise HitchError("usage_error", message, details)


def _invalid(spec: str, why: str, problems: list[str] | None = None) -> HitchError:
    details: dict[str, Any] = {"option": _OPTION, "path": spec}
    if problems:
        details["problems"] = problems
    return HitchError("generation_profile_invalid", f"{_OPTION} {spec}: {why}", details)


def _from_file(spec: str, path: Path) -> GenerationProfile:
    if not path.is_file():
        raise HitchError("usage_error", f"no such file: {spec}", {"option": _OPTION, "path": spec})
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _invalid(spec, f"cannot be read ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise _invalid(spec, f"is not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise _invalid(spec, "must hold one JSON object of sampling fields")
    fields = sorted(SamplingV1.model_fields)
    unknown = sorted(str(k) for k in data if k not in SamplingV1.model_fields)
    if unknown:
        raise _invalid(spec, f"unknown key(s) {', '.join(unknown)}; a profile sets {', '.join(fields)}", unknown)
    try:
        sampling = SamplingV1.model_validate({**DEFAULT_GENERATION.sampling.to_json_dict(), **data}, strict=True)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors(include_url=False, include_input=False)
        ]
        raise _invalid(spec, "; ".join(problems), problems) from exc
    version = digest_json(sampling.to_json_dict())
    return GenerationProfile(name=spec, version=version, source="file", sampling=sampling)


def _from_spec(value: Any) -> Any:
    return generation_profile(value) if isinstance(value, str) else value


# A command's ``--generation`` as a field of what it asks for: the text typed is read into its profile (a bad one
# raises the profile's own error, never a validation error naming our classes).
GenerationSpec = Annotated[GenerationProfile | None, BeforeValidator(_from_spec)]


def describe_sampling(sampling: SamplingV1, profile: GenerationProfile | None = None) -> str:
    """One line a person reads: the profile (when one was named), greedy or the temperature, and the other values."""
    how = "greedy (temperature 0)" if sampling.greedy else f"sampled (temperature {sampling.temperature})"
    named = f"{profile.label()}: " if profile is not None else ""
    return (
        f"{named}{how}, top_p {sampling.top_p}, top_k {sampling.top_k}, min_p {sampling.min_p}, "
        f"repetition_penalty {sampling.repetition_penalty}, seed {sampling.seed}"
    )
