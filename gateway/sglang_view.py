"""What SGLang 0.5.23 hands a Hugging Face chat template for one request, so the gateway counts that prompt.

Owns the request-side half (template-agnostic): the request pipeline's engine stage, :func:`for_engine`
(the engine's bytes, and the messages and tools the template will see), built from

- :func:`engine_body`: the caller's bytes with the lock's additions spliced before the closing brace when the
  lock only added keys, else the body re-serialized;

- :func:`responses_messages`: ``serving_responses._construct_input_messages`` (non-harmony): ``instructions``
  (when non-empty) becomes a leading system message; ``developer`` items become ``system`` messages whose text
  starts with ``"Developer instructions:\\n"``; ``function_call`` items become assistant tool calls (arguments
  coerced to a JSON-object string, else ``"{}"``); ``function_call_output`` becomes a tool message (parts
  joined); ``reasoning`` items with text become ``reasoning_content`` turns; consecutive assistant messages
  are merged into one turn.
- :func:`chat_messages`: ``msg.model_dump()`` + ``normalize_assistant_tool_call_arguments``: ``None`` fields
  dropped, history tool-call arguments parsed from JSON strings into objects (the template re-serializes
  them), content parts normalized to ``{"type": "text", "text": ...}``.
- :func:`template_tools`: ``Tool.model_dump()`` of the request's tools as the template receives them (caller
  key order kept, absent ``description``/``parameters`` as null, a top-level ``defer_loading``), none when
  ``tool_choice`` is ``"none"``, only the named one when it names a function.

and the template-side half (used by :class:`gateway.context_check.ContextChecker`, which knows the template):

- :func:`content_format`: ``detect_jinja_template_content_format`` — ``"openai"`` when the template loops over
  a message's content (or mentions image/audio/video/vision), else ``"string"``.
- :func:`supports_inline_system`: a second, mid-conversation system message renders; if not, SGLang's
  Responses path folds every system message into one leading block joined by blank lines.
- :func:`template_view`: the final messages: system folding (Responses only), content lists flattened with
  ``" "`` for ``"string"`` templates, tool-message text parts joined with ``" "`` either way.
"""

from __future__ import annotations

import base64
import functools
import json
import zlib
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from harness.chat_template import hf_environment
from harness.errors import HitchError

__all__ = [
    "DEVELOPER_LABEL",
    "EngineRequest",
    "chat_messages",
    "content_format",
    "engine_body",
    "for_engine",
    "responses_messages",
    "supports_inline_system",
    "template_tools",
    "template_view",
]

DEVELOPER_LABEL = "Developer instructions:"
_REASONING_STATE_PREFIX = "sglang-reasoning-v1."
_MAX_REASONING_STATE = 8 << 20  # a decoded reasoning blob larger than this cannot fit any context
_FUNCTION_FIELDS = ("description", "name", "parameters", "strict", "defer_loading")
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _conflict(message: str, **details: Any) -> HitchError:
    return HitchError("inference_parameter_conflict", message, details)


# ---------------------------------------------------------------- request side


@dataclass(frozen=True)
class EngineRequest:
    """The engine's bytes, and the prompt's parts as the chat template will see them."""

    body: bytes
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any] | None  # extra template variables SGLang passes (reasoning_effort)


def for_engine(raw: bytes, given: dict[str, Any], body: dict[str, Any], *, responses: bool, changed: bool) -> EngineRequest:
    """The engine's request for a checked ``body`` (``given``: its values before the lock's were pinned in;
    ``changed``: the lock added or replaced one)."""
    if responses:
        messages = responses_messages(body)
        reasoning = body.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    else:
        messages = chat_messages(body["messages"])
        effort = body.get("reasoning_effort")
    tools = template_tools(body.get("tools"), body.get("tool_choice", "auto"), responses=responses)
    out = engine_body(raw, given, body) if changed else raw
    return EngineRequest(out, messages, tools, None if effort is None else {"reasoning_effort": effort})


def _label_developer(content: Any) -> Any:
    """``label_developer_content``: the label goes before the first text part (or as a part of its own)."""
    if isinstance(content, str):
        return f"{DEVELOPER_LABEL}\n{content}"
    if isinstance(content, list):
        for index, part in enumerate(content):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                labelled = {**part, "text": f"{DEVELOPER_LABEL}\n{part['text']}"}
                return [*content[:index], labelled, *content[index + 1 :]]
        return [{"type": "input_text", "text": DEVELOPER_LABEL}, *content]
    return content


def _object_arguments(raw: Any) -> str:
    """A function call's arguments as SGLang keeps them: a JSON-object string, else ``"{}"``."""
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return raw if isinstance(parsed, dict) else "{}"
    if isinstance(raw, dict):
        return json.dumps(raw, separators=(",", ":"), ensure_ascii=False)
    return "{}"


def _decode_reasoning_state(blob: Any) -> str | None:
    if not isinstance(blob, str) or not blob.startswith(_REASONING_STATE_PREFIX):
        return None
    try:
        raw = base64.urlsafe_b64decode(blob[len(_REASONING_STATE_PREFIX) :])
        inflate = zlib.decompressobj()
        text = inflate.decompress(raw, _MAX_REASONING_STATE)
        if inflate.unconsumed_tail:
            raise HitchError(
                "inference_context_exceeded",
                "a replayed reasoning item expands beyond any context",
                {"limit_bytes": _MAX_REASONING_STATE},
            )
        return text.decode("utf-8")
    except (ValueError, zlib.error, UnicodeDecodeError):
        return None


def _reasoning_message(item: dict[str, Any]) -> dict[str, Any] | None:
    def texts(parts: Any) -> list[str]:
        return [p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"]]

    found = texts(item.get("summary")) or texts(item.get("content"))
    if not found:
        restored = _decode_reasoning_state(item.get("encrypted_content"))
        found = [restored] if restored else []
    return {"role": "assistant", "reasoning_content": "\n".join(found)} if found else None


def _responses_item(item: dict[str, Any]) -> dict[str, Any] | None:
    """``_normalize_response_message_for_chat`` for the item kinds the gateway accepts."""
    kind = item.get("type")
    if kind == "function_call":
        call = {
            "id": item.get("call_id") or item.get("id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": _object_arguments(item.get("arguments"))},
        }
        return {"role": "assistant", "tool_calls": [call]}
    if kind == "function_call_output":
        output = item.get("output", "")
        if isinstance(output, list):
            output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": output}
    if kind == "reasoning":
        return _reasoning_message(item)
    message = dict(item)
    if message.get("role") == "developer":
        message = {**message, "role": "system", "content": _label_developer(message.get("content"))}
    return {k: v for k, v in message.items() if v is not None and k not in ("id", "status", "type")}


def _as_parts(content: Any) -> list[Any]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content}] if isinstance(content, str) and content else []


def _merge_assistants(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``_merge_consecutive_assistant_messages``: one Responses turn (message + calls) is one chat turn."""
    merged: list[dict[str, Any]] = []
    for msg in messages:
        prev = merged[-1] if merged else None
        if not (
            msg.get("role") == "assistant"
            and prev is not None
            and prev.get("role") == "assistant"
            and (prev.get("phase") == msg.get("phase") or set(prev) == {"role", "reasoning_content"})
        ):
            merged.append(msg)
            continue
        prev = merged[-1] = dict(prev)
        if msg.get("phase") is not None:
            prev["phase"] = msg["phase"]
        new = msg.get("content")
        if new is not None and new != "":
            old = prev.get("content")
            if old is None or old == "":
                prev["content"] = new
            elif isinstance(old, str) and isinstance(new, str):
                prev["content"] = old + "\n\n" + new
            else:
                prev["content"] = _as_parts(old) + _as_parts(new)
        if msg.get("tool_calls"):
            prev["tool_calls"] = list(prev.get("tool_calls") or []) + list(msg["tool_calls"])
        if msg.get("reasoning_content"):
            had = prev.get("reasoning_content")
            prev["reasoning_content"] = f"{had}\n{msg['reasoning_content']}" if had else msg["reasoning_content"]
    return merged


def responses_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages of a (policy-checked) Responses body, as SGLang builds them."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    inp = body.get("input")
    if isinstance(inp, str):
        messages.append({"role": "user", "content": inp})
        return messages
    for item in inp or []:
        normalized = _responses_item(item)
        if normalized is not None:
            messages.append(normalized)
    return chat_messages(_merge_assistants(messages))


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the template receives them (before the template-specific content flattening)."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        view = {k: v for k, v in msg.items() if v is not None}
        content = view.get("content")
        if content is None:
            view["content"] = ""
        elif isinstance(content, list):
            view["content"] = [
                {"type": "text", "text": p.get("text", "")}
                if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text")
                else p
                for p in content
            ]
        calls = view.get("tool_calls")
        if view.get("role") == "assistant" and isinstance(calls, list):
            view["tool_calls"] = [_parsed_call(c) for c in calls]
        out.append(view)
    return out


def _parsed_call(call: Any) -> Any:
    """``normalize_assistant_tool_call_arguments``: a JSON-object argument string becomes the object (an
    invalid one stays a string here; SGLang refuses that request itself)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        parsed = json.loads(function["arguments"])
    except ValueError:
        return call
    if not isinstance(parsed, dict):
        return call
    return {**call, "function": {**function, "arguments": parsed}}


def _function_dump(function: dict[str, Any], tool_defer: Any) -> dict[str, Any]:
    """``Function.model_dump()``: the caller's key order, absent description/parameters as null, strict and
    defer_loading only when set (a tool-level defer_loading is copied down when the function has none)."""
    values = {k: function.get(k) for k in _FUNCTION_FIELDS}
    if values["defer_loading"] is None:
        values["defer_loading"] = tool_defer
    data = {k: v for k, v in values.items() if not (k in ("strict", "defer_loading") and v is None)}
    order = [k for k in function if k in data]
    return {k: data[k] for k in order + [k for k in data if k not in order]}


def _selected(dumped: list[dict[str, Any]], tool_choice: Any) -> list[dict[str, Any]] | None:
    if tool_choice == "none":
        return None
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool_choice.get("name")
        return [t for t in dumped if t["function"].get("name") == name] or None
    return dumped or None


def template_tools(tools: list[dict[str, Any]] | None, tool_choice: Any, *, responses: bool) -> list[dict[str, Any]] | None:
    """The ``tools`` the chat template renders for a request's (policy-checked, function-only) tools."""
    if not tools:
        return None
    dumped: list[dict[str, Any]] = []
    for tool in tools:
        if responses:  # _response_tools_to_chat_tools: Function(name, description, parameters, strict)
            strict = tool.get("strict")
            function: dict[str, Any] = {
                "name": tool.get("name"),
                "description": tool.get("description"),
                "parameters": tool.get("parameters"),
                "strict": False if strict is None else strict,
            }
            dumped.append({"type": "function", "function": function, "defer_loading": None})
        else:
            given = tool.get("function")
            function = given if isinstance(given, dict) else {}
            defer = tool.get("defer_loading")
            kind = tool.get("type", "function")
            dumped.append({"type": kind, "function": _function_dump(function, defer), "defer_loading": defer})
    return _selected(dumped, tool_choice)


def engine_body(raw: bytes, given: dict[str, Any], body: dict[str, Any]) -> bytes:
    """The engine's body: the caller's bytes with the lock's additions spliced before the closing brace
    when the policy only added keys (dicts keep insertion order, so additions come last), else the body
    re-serialized. Splicing needs a plain UTF-8 object (``{`` first, ``}`` last: not UTF-16/32, no BOM)."""
    end = raw.rstrip()
    if (
        not given
        or not end.endswith(b"}")
        or not raw.lstrip().startswith(b"{")
        or any(body.get(k, body) is not v for k, v in given.items())  # a given value was replaced
    ):
        return _ENCODE(body).encode()
    added = tuple((k, type(v), v) for k, v in tuple(body.items())[len(given) :])
    return end[:-1] + b"," + _additions(added)


@functools.lru_cache(maxsize=256)
def _additions(added: tuple[tuple[str, type, Any], ...]) -> bytes:
    """``"k":v,...}`` for the lock's additions: a few lock-derived sets per lock, so cached. The key holds
    each value's type, since 1 == 1.0 == True would otherwise share an entry and encode differently."""
    return _ENCODE({k: v for k, _, v in added})[1:].encode()


# ---------------------------------------------------------------- template side


def _hf_environment() -> ImmutableSandboxedEnvironment:
    return hf_environment(with_globals=False)


def _reads(node: nodes.Node, varname: str, key: str) -> bool:
    """``_is_var_or_elems_access(node, varname, key)``."""
    if isinstance(node, nodes.Filter):
        return node.node is not None and _reads(node.node, varname, key)
    if isinstance(node, nodes.Test):
        return _reads(node.node, varname, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _reads(node.node, varname, key)
    if isinstance(node, nodes.Getitem):
        return _is_name(node.node, varname) and isinstance(node.arg, nodes.Const) and node.arg.value == key
    if isinstance(node, nodes.Getattr):
        return _is_name(node.node, varname) and node.attr == key
    return False


def _is_name(node: nodes.Node, varname: str) -> bool:
    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == varname


def content_format(template: str) -> str:
    """``"openai"`` (content lists reach the template) or ``"string"`` (they are flattened first)."""
    if any(word in template for word in ("image", "audio", "video", "vision")):
        return "openai"
    try:
        ast = _hf_environment().parse(template)
        for loop in ast.find_all(nodes.For):
            if any(_reads(loop.iter, var, "content") for var in ("message", "msg", "m")):
                return "openai"
    except Exception:  # SGLang treats an unparsable template as "string" too
        return "string"
    return "string"


def supports_inline_system(template: str, globals_: dict[str, Any]) -> bool:
    """``detect_inline_system_support``: does a second system message reach the prompt?"""
    sentinel = "__sglang_inline_system_sentinel__"
    env = _hf_environment()
    env.globals.update(globals_)
    try:
        rendered = env.from_string(template).render(
            messages=[
                {"role": "system", "content": "t"},
                {"role": "user", "content": "t"},
                {"role": "system", "content": sentinel},
                {"role": "user", "content": "t"},
            ],
            add_generation_prompt=False,
        )
    except Exception:
        return False
    return sentinel in rendered


def _is_text_part(part: Any) -> bool:
    return isinstance(part, str) or (isinstance(part, dict) and part.get("type") == "text")


def _joined(parts: list[Any]) -> str:
    return " ".join(p["text"] for p in parts if isinstance(p, dict) and p.get("type") in ("text", "input_text"))


def template_view(messages: list[dict[str, Any]], fmt: str, fold_system: bool) -> list[dict[str, Any]]:
    """The messages the template renders. ``fold_system``: Responses on a template without inline system
    support (every system text, in order, joined by a blank line into one leading system message)."""
    if fold_system:
        chunks: list[str] = []
        rest: list[dict[str, Any]] = []
        for m in messages:
            if m.get("role") != "system":
                rest.append(m)
            elif isinstance(m.get("content"), str):
                chunks.append(m["content"])
            elif isinstance(m.get("content"), list):
                chunks.extend(p["text"] for p in m["content"] if isinstance(p, dict) and isinstance(p.get("text"), str))
        messages = ([{"role": "system", "content": "\n\n".join(chunks)}] if chunks else []) + rest
    if not any(isinstance(m.get("content"), list) for m in messages):
        return messages
    out: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            if fmt == "string":
                m = {**m, "content": _joined(content)}
            elif m.get("role") == "tool" and all(_is_text_part(p) for p in content):  # normalize_tool_content
                m = {**m, "content": " ".join(p if isinstance(p, str) else p.get("text", "") for p in content)}
        out.append(m)
    return out
