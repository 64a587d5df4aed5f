"""The pipeline's second stage: the request is well formed, as SGLang 0.5.23 accepts it.

Owns :func:`check_shape`: the body's nesting, the parameter surface (a parameter outside the allow-list is
refused, never dropped), every forwarded field's type and shape, text-only content (image, audio and file
input is ``inference_modality_unsupported``). What the lock permits is the next stage
(:mod:`gateway.lock_check`). The engine is never sent a value its request models refuse, or one its
``mode="before"`` validators crash on (``ChatCompletionRequest.set_json_schema`` calls
``response_format.get`` on whatever it is given: a string there was an engine 500). A shape refusal is 400
``inference_parameter_conflict`` with the field's path as ``parameter``. The rules follow
``sglang/srt/entrypoints/openai/protocol.py`` (0.5.23); where pydantic would coerce ("true" for a bool, 1.0
for an int) the gateway is strict: OpenAI's wire types only.

Nesting: ``json.loads`` guards its own recursion at a limit that depends on the parser's stack, so a body just
under the gateway's can be over the engine's (the fake engine answered a 980-deep tool schema with a bare
500): a body nests at most :data:`BODY_MAX_DEPTH` deep, proved by an iterative walk (:func:`check_depth`) run
only when the body has more brackets than that. Free-form values (metadata, output schemas) are held to
:data:`MAX_DEPTH`; tool schemas only to the body's limit (SGLang answers 400 on one too deep for it).
"""

from __future__ import annotations

from typing import Any

from gateway.routes import RouteName
from harness.errors import HitchError

__all__ = ["BODY_MAX_DEPTH", "MAX_DEPTH", "check_depth", "check_shape"]

MAX_DEPTH = 64
BODY_MAX_DEPTH = 512
# the parameter surface: what each route may carry (what the lock permits is gateway.lock_check's)
_COMMON = (
    "model stream temperature top_p top_k min_p repetition_penalty seed frequency_penalty presence_penalty tools"
    " parallel_tool_calls store"
)
_CHAT_KEYS = frozenset(
    f"{_COMMON} messages stream_options stop tool_choice user metadata response_format logprobs top_logprobs"
    " reasoning_effort max_tokens max_completion_tokens n modalities ignore_eos min_tokens".split()
)
_RESPONSES_KEYS = frozenset(
    f"{_COMMON} input instructions tool_choice include metadata user reasoning text stop prompt_cache_key"
    " safety_identifier max_tool_calls top_logprobs stream_options max_output_tokens previous_response_id"
    " background truncation client_metadata".split()
)
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_CHAT_ROLES = frozenset({"system", "assistant", "tool", "function", "developer", "user"})
_RESPONSES_ROLES = frozenset({"user", "assistant", "system", "developer"})
_TOOL_CHOICE_MODES = frozenset({"auto", "required", "none"})
_RESPONSE_FORMATS = frozenset({"text", "json_object", "json_schema"})
_EFFORT_TIERS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"})
_SUMMARIES = frozenset({"auto", "concise", "detailed"})
_VERBOSITY = frozenset({"low", "medium", "high"})
_INCLUDE = frozenset({
    "code_interpreter_call.outputs", "computer_call_output.output.image_url", "file_search_call.results",
    "message.input_image.image_url", "message.output_text.logprobs", "reasoning.encrypted_content",
})  # fmt: skip
_MAX_TOP_LOGPROBS = 20


def check_shape(route: RouteName, raw: bytes, body: dict[str, Any]) -> None:
    """Refuse ``body`` (parsed from ``raw``) unless the gateway can forward it to the engine as it is."""
    if raw.count(b"{") + raw.count(b"[") > BODY_MAX_DEPTH:  # else it cannot nest that deep: no walk
        try:
            check_depth(body, "body", BODY_MAX_DEPTH)
        except HitchError:
            raise HitchError(
                "inference_protocol_unsupported", f"the request body nests deeper than {BODY_MAX_DEPTH} levels", {}
            ) from None
    chat = route == "/v1/chat/completions"
    extra = body.keys() - (_CHAT_KEYS if chat else _RESPONSES_KEYS)
    if extra:
        unknown = sorted(extra)
        one = {"parameter": unknown[0]} if len(unknown) == 1 else {}
        raise _conflict(f"unsupported parameter(s): {', '.join(unknown)}", parameters=unknown, **one)
    if not isinstance(body.get("stream", False), bool):
        raise _conflict("stream must be a boolean", parameter="stream")
    if chat:
        _chat_fields(body)
        _chat_messages(body)
    else:
        _responses_fields(body)
        _responses_input(body)


def check_depth(value: Any, param: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``value`` when its containers nest deeper than ``limit``: a level-by-level walk (no recursion
    to blow, no per-node allocation beyond the next level's list)."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise HitchError(
                "inference_parameter_conflict", f"{param} nests deeper than {limit} levels", {"parameter": param, "limit": limit}
            )
        nxt = []
        for node in level:
            for child in node.values() if type(node) is dict else node:
                if type(child) is dict or type(child) is list:
                    nxt.append(child)
        level = nxt


def _conflict(message: str, **details: Any) -> HitchError:
    return HitchError("inference_parameter_conflict", message, details)


def _bad(param: str, message: str) -> HitchError:
    return HitchError("inference_parameter_conflict", f"{param}: {message}", {"parameter": param})


def _opt_str(obj: dict[str, Any], key: str, where: str) -> None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise _bad(f"{where}{key}", "must be a string")


def _opt_bool(obj: dict[str, Any], key: str, where: str) -> None:
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise _bad(f"{where}{key}", "must be a boolean")


def _one_of(value: Any, choices: frozenset[str]) -> bool:
    return isinstance(value, str) and value in choices  # a list or dict is unhashable: never ``in`` a set


def _opt_enum(obj: dict[str, Any], key: str, choices: frozenset[str], where: str) -> None:
    value = obj.get(key)
    if value is not None and not _one_of(value, choices):
        raise _bad(f"{where}{key}", f"must be one of {sorted(choices)}")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dict(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(param, "must be an object")
    return value


def _opt_object(body: dict[str, Any], key: str) -> dict[str, Any] | None:
    """``body[key]``: None when absent or null, else it must be an object."""
    value = body.get(key)
    return None if value is None else _dict(value, key)


def _free(obj: dict[str, Any], key: str, where: str) -> None:
    """An optional free-form object (a JSON schema, metadata): an object, bounded in depth."""
    value = obj.get(key)
    if value is not None:
        check_depth(_dict(value, f"{where}{key}"), f"{where}{key}")


def _stop(body: dict[str, Any]) -> None:
    stop = body.get("stop")
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise _bad("stop", "must be a string or a list of strings")


def _top_logprobs(body: dict[str, Any]) -> None:
    value = body.get("top_logprobs")
    if value is not None and not (_int(value) and 0 <= value <= _MAX_TOP_LOGPROBS):
        raise _bad("top_logprobs", f"must be an integer in [0, {_MAX_TOP_LOGPROBS}]")


def _stream_options(body: dict[str, Any]) -> None:
    opts = body.get("stream_options")
    if opts is None:
        return
    for key, value in _dict(opts, "stream_options").items():
        if value is not None and not isinstance(value, bool):
            raise _bad(f"stream_options.{key}", "must be a boolean")


def _common(body: dict[str, Any]) -> None:
    _stream_options(body)
    _stop(body)
    _top_logprobs(body)
    _opt_str(body, "user", "")
    _opt_bool(body, "parallel_tool_calls", "")
    _free(body, "metadata", "")


def _tool_names(body: dict[str, Any], chat: bool) -> list[Any]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    if chat:
        return [t["function"].get("name") for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    return [t.get("name") for t in tools if isinstance(t, dict)]


def _choice_matches_tools(body: dict[str, Any], name: str | None, chat: bool) -> None:
    """serving_chat._validate_request: 'required' needs tools, a named function must be one of them."""
    names = _tool_names(body, chat)
    if name is None:
        if not names:
            raise _bad("tool_choice", "'required' needs tools")
    elif name not in names:
        raise _bad("tool_choice", f"names {name!r}, which is not among the request's tools")


def _chat_tool_choice(body: dict[str, Any]) -> None:
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none"):
        return
    if choice == "required":
        _choice_matches_tools(body, None, chat=True)
        return
    if isinstance(choice, dict) and choice.get("type", "function") == "function":
        fn = choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            _choice_matches_tools(body, fn["name"], chat=True)
            return
    raise _bad("tool_choice", "must be 'auto', 'required', 'none' or {'type': 'function', 'function': {'name': ...}}")


def _chat_tools(body: dict[str, Any]) -> None:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return  # absent, or refused by the policy
    for i, tool in enumerate(tools):
        where = f"tools[{i}]."
        tool = _dict(tool, f"tools[{i}]")
        if tool.get("type") != "function":
            continue  # the policy refuses it by name
        _opt_bool(tool, "defer_loading", where)
        fn = _dict(tool.get("function"), f"{where}function")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _bad(f"{where}function.name", "must be a non-empty string")
        _opt_str(fn, "description", f"{where}function.")
        _opt_bool(fn, "strict", f"{where}function.")
        _opt_bool(fn, "defer_loading", f"{where}function.")
        if fn.get("parameters") is not None:
            _dict(fn["parameters"], f"{where}function.parameters")


def _format(value: Any, where: str) -> tuple[dict[str, Any], str]:
    """An output format object (chat's ``response_format``, Responses' ``text.format``) and its type."""
    fmt = _dict(value, where)
    kind = fmt.get("type")
    if not _one_of(kind, _RESPONSE_FORMATS):
        raise _bad(f"{where}.type", "must be 'text', 'json_object' or 'json_schema'")
    return fmt, str(kind)


def _response_format(body: dict[str, Any]) -> None:
    if body.get("response_format") is None:
        return
    fmt, kind = _format(body["response_format"], "response_format")
    if "schema" in fmt:
        raise _bad("response_format.schema", "put the schema in response_format.json_schema.schema")
    if kind != "json_schema":
        if fmt.get("json_schema") is not None:
            raise _bad("response_format.json_schema", "is only for type 'json_schema'")
        return
    _json_schema(_dict(fmt.get("json_schema"), "response_format.json_schema"), "response_format.json_schema.")


def _json_schema(spec: dict[str, Any], where: str) -> None:
    """A named JSON schema: chat's ``response_format.json_schema``, Responses' ``text.format``."""
    if not isinstance(spec.get("name"), str):
        raise _bad(f"{where}name", "must be a string")
    _opt_str(spec, "description", where)
    _opt_bool(spec, "strict", where)
    _free(spec, "schema", where)


def _reasoning_effort(body: dict[str, Any]) -> None:
    effort = body.get("reasoning_effort")
    if effort is None or _one_of(effort, _EFFORT_TIERS):
        return
    if isinstance(effort, int | float) and not isinstance(effort, bool) and 0.0 <= effort <= 0.99:
        return
    raise _bad("reasoning_effort", f"must be one of {sorted(_EFFORT_TIERS)} or a number in [0, 0.99]")


def _tool_calls(calls: Any, where: str) -> None:
    if calls is None:
        return
    if not isinstance(calls, list):
        raise _bad(f"{where}tool_calls", "must be a list")
    for j, call in enumerate(calls):
        at = f"{where}tool_calls[{j}]."
        call = _dict(call, f"{where}tool_calls[{j}]")
        _opt_str(call, "id", at)
        index = call.get("index")
        if index is not None and not _int(index):
            raise _bad(f"{at}index", "must be an integer")
        if call.get("type", "function") != "function":
            raise _bad(f"{at}type", "must be 'function'")
        fn = _dict(call.get("function"), f"{at}function")
        _opt_str(fn, "name", f"{at}function.")
        args = fn.get("arguments")
        if args is not None and not isinstance(args, str):
            _free(fn, "arguments", f"{at}function.")


def _chat_message(msg: dict[str, Any], i: int) -> None:
    role = msg.get("role")
    if not isinstance(role, str) or (role not in _CHAT_ROLES and role.lower() not in _CHAT_ROLES):
        raise _bad(f"messages[{i}].role", f"must be one of {sorted(_CHAT_ROLES)}")
    if len(msg) == 2 and msg.get("content") is not None:
        return  # {"role", "content"}: most of a conversation, and the content is checked by the caller
    where = f"messages[{i}]."
    if role.lower() == "user" and msg.get("content") is None:
        raise _bad(f"{where}content", "a user message needs content")
    for key in ("name", "tool_call_id", "reasoning_content"):
        _opt_str(msg, key, where)
    _opt_bool(msg, "prefix", where)
    _tool_calls(msg.get("tool_calls"), where)
    if msg.get("tools") is not None:
        raise _bad(f"{where}tools", "message-level tools are not supported; send them as the request's tools")


def _chat_fields(body: dict[str, Any]) -> None:
    """Every chat field present has the type SGLang 0.5.23 accepts (messages: :func:`_chat_messages`)."""
    _common(body)
    _chat_tool_choice(body)
    _chat_tools(body)
    _response_format(body)
    _reasoning_effort(body)
    _opt_bool(body, "logprobs", "")


def _responses_tool_choice(body: dict[str, Any]) -> None:
    choice = body.get("tool_choice")
    if choice is None or _one_of(choice, _TOOL_CHOICE_MODES):
        return
    if isinstance(choice, dict) and isinstance(choice.get("type"), str):
        name = choice.get("name")
        fn = choice.get("function")
        if choice["type"] != "function" or isinstance(name, str) or (isinstance(fn, dict) and isinstance(fn.get("name"), str)):
            check_depth(choice, "tool_choice")
            return
    raise _bad("tool_choice", "must be 'auto', 'required', 'none' or {'type': 'function', 'name': ...}")


def _responses_tools(body: dict[str, Any]) -> None:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return
    for i, tool in enumerate(tools):
        where = f"tools[{i}]."
        tool = _dict(tool, f"tools[{i}]")
        if tool.get("type") != "function":
            continue  # the policy refuses it by name
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _bad(f"{where}name", "must be a non-empty string")  # ResponseTool.validate_function_tool
        _opt_str(tool, "description", where)
        _opt_bool(tool, "strict", where)
        _opt_bool(tool, "defer_loading", where)
        if tool.get("parameters") is not None:
            _dict(tool["parameters"], f"{where}parameters")


def _include(body: dict[str, Any]) -> None:
    include = body.get("include")
    if include is None:
        return
    if not isinstance(include, list) or not all(_one_of(v, _INCLUDE) for v in include):
        raise _bad("include", f"must be a list of {sorted(_INCLUDE)}")


def _text(body: dict[str, Any]) -> None:
    text = _opt_object(body, "text")
    if text is None:
        return
    _opt_enum(text, "verbosity", _VERBOSITY, "text.")
    if text.get("format") is None:
        return
    fmt, kind = _format(text["format"], "text.format")
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise _bad("text.format.schema", "must be an object")
        _json_schema(fmt, "text.format.")


def _reasoning(body: dict[str, Any]) -> None:
    reasoning = _opt_object(body, "reasoning")
    if reasoning is None:
        return
    _opt_enum(reasoning, "effort", _EFFORT_TIERS, "reasoning.")
    _opt_enum(reasoning, "summary", _SUMMARIES, "reasoning.")
    _opt_enum(reasoning, "generate_summary", _SUMMARIES, "reasoning.")


def _responses_fields(body: dict[str, Any]) -> None:
    """Every Responses field present has the type SGLang 0.5.23 accepts (input items: :func:`_responses_input`)."""
    _common(body)
    _responses_tool_choice(body)
    _responses_tools(body)
    _include(body)
    _text(body)
    _reasoning(body)
    for key in ("prompt_cache_key", "safety_identifier", "instructions"):
        _opt_str(body, key, "")
    value = body.get("max_tool_calls")
    if value is not None and not (_int(value) and value >= 0):
        raise _bad("max_tool_calls", "must be a non-negative integer")


def _parts(parts: Any, param: str) -> None:
    if parts is None:
        return
    if not isinstance(parts, list):
        raise _bad(param, "must be a list")
    for j, part in enumerate(parts):
        part = _dict(part, f"{param}[{j}]")
        if not isinstance(part.get("text"), str):
            raise _bad(f"{param}[{j}].text", "must be a string")


def _input_item(item: dict[str, Any], kind: str, i: int) -> None:
    """One Responses input item of a kind the gateway forwards: well formed, its content text."""
    where = f"input[{i}]."
    _opt_str(item, "id", where)
    if kind == "message":
        if not _one_of(item.get("role"), _RESPONSES_ROLES):
            raise _bad(f"{where}role", f"must be one of {sorted(_RESPONSES_ROLES)}")
        _text_only(item.get("content"), f"input[{i}]")
    elif kind == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                raise _bad(f"{where}{key}", "must be a string")
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise _bad(f"{where}call_id", "must be a string")
        _text_only(item.get("output"), f"input[{i}]")
    else:  # reasoning
        _parts(item.get("summary"), f"{where}summary")
        _parts(item.get("content"), f"{where}content")
        _opt_str(item, "encrypted_content", where)


def _chat_messages(body: dict[str, Any]) -> None:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _conflict("messages must be a non-empty list", parameter="messages")
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise _conflict(f"messages[{i}] must be an object", parameter=f"messages[{i}]")
        _chat_message(msg, i)
        _text_only(msg.get("content"), f"messages[{i}]")


def _responses_input(body: dict[str, Any]) -> None:
    """Every input item is of a kind the gateway forwards, well formed, its content text."""
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _conflict("instructions must be a string", parameter="instructions")
    inp = body.get("input")
    if isinstance(inp, str):
        return
    if not isinstance(inp, list) or not inp:
        raise _conflict("input must be a string or a non-empty list", parameter="input")
    for i, item in enumerate(inp):
        if not isinstance(item, dict):
            raise _conflict(f"input[{i}] must be an object", parameter=f"input[{i}]")
        kind = item.get("type", "message")
        where = f"input[{i}]"
        if not isinstance(kind, str):
            raise _conflict(f"{where}: type must be a string", parameter=f"{where}.type")
        if kind in ("message", "function_call", "function_call_output", "reasoning"):
            _input_item(item, kind, i)
        elif kind in ("input_image", "input_file", "input_audio", "image_generation_call"):
            raise HitchError(
                "inference_modality_unsupported",
                f"{where}: {kind} is not text",
                {"part_type": kind, "parameter": f"{where}.type"},
            )
        else:
            raise _conflict(f"{where}: item type {kind!r} is not supported", parameter=f"{where}.type")


def _text_only(content: Any, where: str) -> None:
    """A message content must be text: a string, or a list of strings and text parts (any other part is a
    modality refusal). The template view keeps the content as given (see gateway.sglang_view)."""
    if content is None or isinstance(content, str):
        return
    if isinstance(content, list):
        for j, part in enumerate(content):
            if isinstance(part, str):
                continue
            kind = part.get("type") if isinstance(part, dict) else None
            if not isinstance(kind, str) or kind not in _TEXT_PARTS:
                raise HitchError(
                    "inference_modality_unsupported",
                    f"{where}: content part {kind!r} is not text",
                    {"part_type": kind if isinstance(kind, str) else None, "parameter": f"{where}.content[{j}].type"},
                )
            if not isinstance(part.get("text"), str):
                raise _conflict(f"{where}: a text part needs a string 'text'", parameter=f"{where}.content[{j}].text")
        return
    raise _conflict(f"{where}: content must be a string or a list of text parts", parameter=f"{where}.content")
