"""Hostile request bodies for the gateway's fuzzing: one generator, driven by a ``random.Random``.

Owns :func:`hostile_case`, shared by the property-based test (``tests/gateway/test_fuzz.py``, where
hypothesis supplies the ``Random`` and shrinks) and the certification check ``security.fuzz.gateway``
(a seeded ``Random``, so a run is reproducible from its seed). Kinds, as an adversary would try them:

- ``mutation``: a valid chat or Responses body with 1-3 edits at random paths (a value replaced by junk of
  another type, a key deleted, an unknown key added, a list emptied);
- ``garbage``: random bytes, truncated JSON, invalid UTF-8, a JSON value that is not an object;
- ``nesting``: arrays or objects nested 50 to 100,000 deep, at the top or inside a field;
- ``huge``: one field holding 10 KB to 2 MB (over the body limit of a small context);
- ``content_type``: a valid body sent as another media type (the gateway reads JSON regardless).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "HostileCase", "hostile_case", "valid_body"]

KINDS = ("mutation", "garbage", "nesting", "huge", "content_type")
CHAT = "/chat/completions"
RESPONSES = "/responses"
_CONTENT_TYPES = (
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "",
    "application/json; charset=latin-1",
)
_ROLES = ("user", "system", "assistant", "tool", "developer", "USER", "wizard", "", None)


@dataclass(frozen=True)
class HostileCase:
    kind: str
    route: str  # relative to the run's base URL
    body: bytes
    content_type: str


def valid_body(route: str, model: str, max_tokens: int = 4) -> dict[str, Any]:
    if route == CHAT:
        return {
            "model": model,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hello"}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "done"},
            ],
            "max_tokens": max_tokens,
            "stream": False,
            "stream_options": None,
            "stop": ["\n\n"],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
            "tool_choice": "auto",
            "response_format": {"type": "text"},
            "user": "u",
        }  # fmt: skip
    return {
        "model": model,
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
        ],
        "max_output_tokens": max_tokens,
        "stream": False,
        "include": ["reasoning.encrypted_content"],
        "text": {"verbosity": "low", "format": {"type": "text"}},
        "reasoning": {"effort": "low"},
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": "auto",
        "store": False,
    }


def _junk(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(16 if depth < 3 else 11)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice((True, False))
    if pick == 2:
        return rng.choice((0, -1, 1, 2**31, -(2**63), 10**30))
    if pick == 3:
        return rng.choice((0.5, -0.0, 1e308, -1e-308, 3.14))
    if pick == 4:
        return rng.choice(("", "x", "auto", "none", "function", "text", "user", "\u0000", "\ud7ff\ue000", "🦀" * 3))
    if pick == 5:
        return "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(1, 64)))
    if pick == 6:
        return []
    if pick == 7:
        return {}
    if pick == 8:
        return rng.choice(_ROLES)
    if pick == 9:
        return {"type": rng.choice(("function", "text", "json_schema", "input_image", "image_url", "x", None, 1))}
    if pick == 10:
        return "9" * rng.randrange(1, 40)
    if pick < 13:
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(1, 4))]
    return {
        rng.choice(("type", "text", "name", "function", "content", "role", "k")): _junk(rng, depth + 1)
        for _ in range(rng.randrange(1, 4))
    }


def _containers(value: Any) -> list[Any]:
    """Every dict and list in ``value``, the root included."""
    out: list[Any] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict | list):
            out.append(node)
            stack.extend(node.values() if isinstance(node, dict) else node)
    return out


def _mutate(rng: random.Random, body: dict[str, Any]) -> None:
    for _ in range(rng.randrange(1, 4)):
        node = rng.choice(_containers(body))
        op = rng.randrange(4)
        if isinstance(node, dict):
            keys = list(node)
            if op == 0 and keys:
                del node[rng.choice(keys)]
            elif op == 1:
                node[rng.choice(("rid", "logit_bias", "ignore_eos", "x", "n", "seed", "stream", "extra_body", "type"))] = _junk(
                    rng
                )
            elif keys:
                node[rng.choice(keys)] = _junk(rng)
        elif node:
            if op == 0:
                node.clear()
            else:
                node[rng.randrange(len(node))] = _junk(rng)
        else:
            node.append(_junk(rng))


def hostile_case(rng: random.Random, model: str, max_tokens: int = 4, kind: str | None = None) -> HostileCase:
    kind = kind or rng.choice(KINDS)
    route = rng.choice((CHAT, RESPONSES))
    body = valid_body(route, model, max_tokens)
    content_type = "application/json"
    if kind == "mutation":
        _mutate(rng, body)
        raw = json.dumps(body).encode()
    elif kind == "garbage":
        pick = rng.randrange(5)
        valid = json.dumps(body).encode()
        if pick == 0:
            raw = rng.randbytes(rng.randrange(0, 4096))
        elif pick == 1:
            raw = valid[: rng.randrange(len(valid))]
        elif pick == 2:
            raw = valid.replace(b'"hello"', b'"\xff\xfe\xc3("', 1)
        elif pick == 3:
            raw = rng.choice((b"[]", b"null", b"1", b'"x"', b"NaN", b"{}", b"", b"\xef\xbb\xbf{}"))
        else:
            raw = valid.replace(b"4", b"1e999", 1).replace(b"false", b"NaN", 1)
    elif kind == "nesting":
        depth = rng.choice((50, 500, 5_000, 100_000))
        if rng.random() < 0.4:
            open_, close = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
            raw = open_ * depth + b"1" + close * depth if open_ != b"[" else open_ * depth + close * depth
        else:
            key = rng.choice(("metadata", "tools", "response_format", "text", "input", "messages", "stop", "tool_choice"))
            placeholder = "\u0001NEST\u0001"
            body[key] = placeholder
            nested = "[" * depth + "]" * depth
            raw = json.dumps(body).replace(json.dumps(placeholder), nested).encode()
    elif kind == "huge":
        size = rng.choice((10_000, 200_000, 2_000_000))
        key = rng.choice(("user", "instructions", "stop", "tool_choice", "metadata", "content"))
        blob = "A" * size
        if key == "content" and route == CHAT:
            body["messages"][1]["content"] = blob
        elif key == "content":
            body["input"][0]["content"][0]["text"] = blob
        else:
            body[key] = blob
        raw = json.dumps(body).encode()
    else:
        content_type = rng.choice(_CONTENT_TYPES)
        raw = json.dumps(body).encode()
    return HostileCase(kind, route, raw, content_type)
