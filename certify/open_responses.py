"""The Open Responses schema and a validator of Responses answers against it.

Owns the reference schema (``open_responses_schema.json``: the Open Responses specification's 2026-04-24
release, trimmed to the parts its public compliance cases use; a copy of
``shared/reference/open-responses-schema.json``) and :func:`resource_errors` / :func:`event_errors` /
:func:`stream_errors`: each returns the schema violations of an answer as short strings (empty: it conforms),
checked with a JSON-Schema (2020-12) validator. A stream's events are each checked against the event type's
schema, and the stream as a whole: ``sequence_number`` strictly increasing, one terminal event last.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import jsonschema  # type: ignore[import-untyped,unused-ignore]

__all__ = ["SCHEMA_VERSION", "event_errors", "resource_errors", "schema", "stream_errors"]

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


@functools.cache
def schema() -> dict[str, Any]:
    text = resources.files("certify").joinpath("open_responses_schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


SCHEMA_VERSION: str = "open-responses 2026-04-24"


@functools.cache
def _validator(definition: str) -> Any:
    root = schema()
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": root["$defs"]})


def _errors(definition: str, instance: Any, where: str) -> list[str]:
    out = []
    for err in sorted(_validator(definition).iter_errors(instance), key=lambda e: list(e.absolute_path)):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        out.append(f"{where}{path}: {err.message[:160]}")
    return out


def resource_errors(obj: Any, where: str = "response") -> list[str]:
    """A non-stream answer (a ``ResponseResource``)."""
    return _errors("ResponseResource", obj, where)


def event_errors(obj: Any, where: str = "event") -> list[str]:
    """One streaming event, checked against its type's schema (an unknown type is an error)."""
    etype = obj.get("type") if isinstance(obj, dict) else None
    definition = schema()["x-stream-event-types"].get(etype) if isinstance(etype, str) else None
    if definition is None:
        return [f"{where}: unknown event type {etype!r}"]
    return _errors(definition, obj, f"{where} {etype}")


def stream_errors(events: list[dict[str, Any]]) -> list[str]:
    """Every event of a stream, plus the stream's order: increasing sequence numbers, the terminal event last."""
    out: list[str] = []
    last: int | None = None
    for i, ev in enumerate(events):
        out.extend(event_errors(ev, f"event[{i}]"))
        seq = ev.get("sequence_number")
        if isinstance(seq, int):
            if last is not None and seq <= last:
                out.append(f"event[{i}]: sequence_number {seq} after {last}")
            last = seq
    if not events or events[-1].get("type") not in _TERMINAL:
        out.append("the stream does not end with a terminal event")
    elif any(ev.get("type") in _TERMINAL for ev in events[:-1]):
        out.append("a terminal event before the last event")
    return out
