"""Request policy: the lock decides sampling, budget, modality and the parameter surface (spec §10.2).

Owns :func:`apply_policy`, which turns one caller body into the body sent to the engine, or refuses it:

- ``model`` must be the binding's wire model.
- Lock sampling is applied (temperature, top_p, top_k, min_p, repetition_penalty, and seed on chat; SGLang's
  Responses request has no seed field, the engine runs with the lock's ``--random-seed``). A caller value
  equal to the lock's is accepted; any other value is ``inference_parameter_conflict``. ``top_k`` 0 in the
  lock means "off" and is sent as SGLang's -1; a caller's 0 or -1 both mean "off". Frequency and presence
  penalties are pinned at 0.
- The output budget may only shrink: 1 <= N <= the lock's ``max_output_tokens``, default the lock's.
  Responses subtracts 2 from ``max_output_tokens`` (reference §6.2), so N + 2 is sent and the caller gets
  exactly N.
- Parallel tool calls follow the lock, like a sampling value: absent, the lock's value is sent; a caller's
  value equal to the lock's passes; any other is ``inference_parameter_conflict`` (nothing tool-related is
  silently altered). A lock claims parallel calls when its tool-call parser hands back every call of an
  answer (:func:`harness.lock.claims_parallel_tool_calls`). Codex 0.171 always sends ``true``: its
  compatibility profile records that, so a lock without parallel calls refuses Codex before a run starts.
- Benchmark sampling controls (chat: ``ignore_eos``, ``min_tokens``; what ``sglang.bench_serving`` and
  AIPerf send to fix the output length): a value equal to SGLang's default (``false``, ``0``) always passes,
  as it changes nothing; any other value needs a lock that names the control in
  ``generation.benchmark_controls`` (a benchmark lock, never an agent run's) and is reported in
  :attr:`PreparedRequest.benchmark_controls` for the evidence row. ``min_tokens`` may not exceed the budget.
- ``client_metadata`` (Responses; Codex's per-turn telemetry ids) is removed before forwarding: SGLang has no
  such field and would ignore it; it never affects generation.
- Parameters outside the allow-list, server-side state (``store: true``, ``previous_response_id``,
  ``background``), truncation, built-in tools, and image/audio/file input are refused with a code, never
  dropped.

The body is parsed once. When the lock changed nothing the caller's bytes are forwarded as they are; when
it only added fields they are spliced into the caller's bytes; only a replaced value re-serializes it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from gateway.intake import parse_object
from gateway.request_shape import check_chat_message, check_chat_shape, check_item, check_responses_shape
from gateway.responses_completion import ResponseFacts, response_facts
from gateway.routes import RouteName
from gateway.sglang_view import chat_messages, responses_messages, template_tools
from harness.contracts.lock import BenchmarkControl, InferenceLockV1
from harness.errors import HitchError

__all__ = ["PreparedRequest", "apply_policy"]

_CHAT_FREE = frozenset(
    {
        "messages", "stream_options", "stop", "tool_choice", "user", "metadata", "response_format",
        "logprobs", "top_logprobs", "reasoning_effort",
    }
)  # fmt: skip
_RESPONSES_FREE = frozenset(
    {
        "input", "instructions", "tool_choice", "include", "metadata", "user", "reasoning", "text", "stop",
        "prompt_cache_key", "safety_identifier", "max_tool_calls", "top_logprobs", "stream_options",
    }
)  # fmt: skip
_COMMON = frozenset(
    {
        "model", "stream", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed",
        "frequency_penalty", "presence_penalty", "tools", "parallel_tool_calls",
    }
)  # fmt: skip
# SGLang's defaults for the benchmark controls (its ChatCompletionRequest): a caller sending them asks for
# nothing the engine would not do anyway.
_ENGINE_DEFAULTS: dict[BenchmarkControl, bool | int] = {"ignore_eos": False, "min_tokens": 0}
_CHAT_KEYS = _CHAT_FREE | _COMMON | _ENGINE_DEFAULTS.keys() | {
    "max_tokens", "max_completion_tokens", "n", "store", "modalities",
}  # fmt: skip
_RESPONSES_KEYS = _RESPONSES_FREE | _COMMON | {
    "max_output_tokens", "store", "previous_response_id", "background", "truncation", "client_metadata",
}  # fmt: skip
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_RESPONSES_BUDGET_HEADROOM = 2
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@dataclass
class PreparedRequest:
    """What the engine will receive, plus what the context check and the evidence need."""

    body: bytes
    stream: bool
    max_output_tokens: int
    messages: list[dict[str, Any]]  # as SGLang hands them to the chat template (see gateway.sglang_view)
    tools: list[dict[str, Any]] | None
    responses: bool = False  # SGLang folds system messages on Responses for templates without inline system
    template_kwargs: dict[str, Any] | None = None  # extra template variables SGLang passes (reasoning_effort)
    benchmark_controls: dict[str, bool | int] | None = None  # controls used at other than SGLang's default
    response_facts: ResponseFacts | None = None  # Responses: what completes the answer (gateway.responses_completion)


def _conflict(message: str, **details: Any) -> HitchError:
    return HitchError("inference_parameter_conflict", message, details)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _conflict(f"{name} must be a number", parameter=name)
    return float(value)


def _budget(name: str, value: Any, cap: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _conflict(f"{name} must be a positive integer", parameter=name)
    if value > cap:
        raise _conflict(f"{name}={value} is above the lock's output budget {cap}", parameter=name, lock_value=cap)
    return value


def _apply_sampling(body: dict[str, Any], lock: InferenceLockV1, with_seed: bool) -> bool:
    """Pin every lock sampling value into ``body``; True when the body changed."""
    g = lock.generation
    changed = False
    wire_top_k = -1 if g.top_k == 0 else g.top_k
    pinned: list[tuple[str, float]] = [
        ("temperature", g.temperature),
        ("top_p", g.top_p),
        ("min_p", g.min_p),
        ("repetition_penalty", g.repetition_penalty),
    ]
    for name, want in pinned:
        if name in body:
            if _number(name, body[name]) != want:
                raise _conflict(f"{name}={body[name]} conflicts with the lock's {want}", parameter=name, lock_value=want)
        else:
            body[name] = want
            changed = True
    if "top_k" in body:
        got = body["top_k"]
        if isinstance(got, bool) or not isinstance(got, int):
            raise _conflict("top_k must be an integer", parameter="top_k")
        same = got == g.top_k or (g.top_k == 0 and got == -1)
        if not same:
            raise _conflict(f"top_k={got} conflicts with the lock's {g.top_k}", parameter="top_k", lock_value=g.top_k)
        if got != wire_top_k:
            body["top_k"] = wire_top_k
            changed = True
    else:
        body["top_k"] = wire_top_k
        changed = True
    if "seed" in body:
        seed = body["seed"]
        if isinstance(seed, bool) or seed != g.seed:
            raise _conflict(f"seed={seed} conflicts with the lock's {g.seed}", parameter="seed", lock_value=g.seed)
    elif with_seed:
        body["seed"] = g.seed
        changed = True
    for name in ("frequency_penalty", "presence_penalty"):
        if name in body and _number(name, body[name]) != 0.0:
            raise _conflict(f"{name} is pinned at 0 by the lock", parameter=name, lock_value=0.0)
    return changed


def _check_text(content: Any, where: str) -> None:
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


def _benchmark_controls(body: dict[str, Any], lock: InferenceLockV1, budget: int) -> dict[str, bool | int] | None:
    """The benchmark controls ``body`` sets to other than SGLang's default, each permitted by the lock."""
    used: dict[str, bool | int] = {}
    for name, default in _ENGINE_DEFAULTS.items():
        if name not in body:
            continue
        value = body[name]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise _conflict(f"{name} must be a boolean", parameter=name)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _conflict(f"{name} must be a non-negative integer", parameter=name)
        if value == default:
            continue
        if name not in lock.generation.benchmark_controls:
            raise _conflict(
                f"{name}={json.dumps(value)} needs a benchmark lock (one that permits benchmark sampling controls)",
                parameter=name,
                engine_default=default,
            )
        if name == "min_tokens" and value > budget:
            raise _conflict(f"min_tokens={value} is above the output budget {budget}", parameter=name, lock_value=budget)
        used[name] = value
    return used or None


def _tools_policy(body: dict[str, Any], lock: InferenceLockV1, responses: bool) -> tuple[bool, list[dict[str, Any]] | None]:
    tools = body.get("tools")
    changed = False
    if tools in (None, []):
        return False, None
    if not isinstance(tools, list):
        raise _conflict("tools must be a list", parameter="tools")
    if not lock.protocol.tool_calls:
        raise _conflict("the lock does not enable tool calls", parameter="tools")
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise _conflict(f"tool type {kind!r} is not supported; only function tools", parameter=f"tools[{i}].type")
    parallel = body.get("parallel_tool_calls")
    claimed = lock.protocol.parallel_tool_calls
    if parallel is None:
        body["parallel_tool_calls"] = claimed
        changed = True
    elif parallel != claimed:  # a boolean (request_shape checked it)
        raise _conflict(
            f"parallel_tool_calls={json.dumps(parallel)} conflicts with the lock's {json.dumps(claimed)}",
            parameter="parallel_tool_calls",
            lock_value=claimed,
        )
    return changed, template_tools(tools, body.get("tool_choice", "auto"), responses=responses)


_Prepared = tuple[bool, int, list[dict[str, Any]], list[dict[str, Any]] | None]


def _chat(body: dict[str, Any], lock: InferenceLockV1) -> _Prepared:
    cap = lock.generation.max_output_tokens
    changed = _apply_sampling(body, lock, with_seed=True)
    if body.get("n", 1) != 1:
        raise _conflict("n must be 1", parameter="n")
    if body.get("store") not in (None, False):
        raise _conflict("store=true is not supported", parameter="store")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise HitchError(
            "inference_modality_unsupported",
            "only text output is supported",
            {"modalities": modalities, "parameter": "modalities"},
        )
    given = [(k, body[k]) for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None]
    if len(given) == 2 and given[0][1] != given[1][1]:
        raise _conflict("max_completion_tokens and max_tokens disagree", parameter="max_tokens")
    if given:
        budget = _budget(given[0][0], given[0][1], cap)
    else:
        budget = cap
        body["max_completion_tokens"] = cap
        changed = True
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _conflict("messages must be a non-empty list", parameter="messages")
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise _conflict(f"messages[{i}] must be an object", parameter=f"messages[{i}]")
        check_chat_message(msg, i)
        _check_text(msg.get("content"), f"messages[{i}]")
    tools_changed, tools = _tools_policy(body, lock, responses=False)
    return changed or tools_changed, budget, chat_messages(raw), tools


def _check_responses_input(body: dict[str, Any]) -> None:
    """Refuse what the gateway does not forward; the template view itself is :func:`responses_messages`."""
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
            check_item(item, kind, i)
        if kind == "message":
            _check_text(item.get("content"), where)
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                _check_text(output, where)
        elif kind in ("function_call", "reasoning"):
            continue
        elif kind in ("input_image", "input_file", "input_audio", "image_generation_call"):
            raise HitchError(
                "inference_modality_unsupported",
                f"{where}: {kind} is not text",
                {"part_type": kind, "parameter": f"{where}.type"},
            )
        else:
            raise _conflict(f"{where}: item type {kind!r} is not supported", parameter=f"{where}.type")


def _responses(body: dict[str, Any], lock: InferenceLockV1) -> _Prepared:
    cap = lock.generation.max_output_tokens
    changed = _apply_sampling(body, lock, with_seed=False)
    body.pop("client_metadata", None)  # client telemetry ids; no engine field (see the module docstring)
    if body.get("previous_response_id") is not None:
        raise _conflict("previous_response_id is not supported; send the full history", parameter="previous_response_id")
    if body.get("background") not in (None, False):
        raise _conflict("background responses are not supported", parameter="background")
    if body.get("truncation") not in (None, "disabled"):
        raise _conflict("truncation is never applied; use 'disabled'", parameter="truncation")
    store = body.get("store")
    if store is None:
        body["store"] = False
        changed = True
    elif store is not False:
        raise _conflict("store=true is not supported", parameter="store")
    given = body.get("max_output_tokens")
    budget = cap if given is None else _budget("max_output_tokens", given, cap)
    body["max_output_tokens"] = budget + _RESPONSES_BUDGET_HEADROOM
    _check_responses_input(body)
    messages = responses_messages(body)
    _, tools = _tools_policy(body, lock, responses=True)
    del changed  # the budget is always rewritten (N + 2), so the body always changes
    return True, budget, messages, tools


def apply_policy(route: RouteName, raw: bytes, lock: InferenceLockV1, wire_model: str) -> PreparedRequest:
    """Check ``raw`` against the lock; the returned body is what the engine receives."""
    body = parse_object(raw)
    try:
        return _prepare(route, raw, body, lock, wire_model)
    except RecursionError:  # a value nested almost to json's own limit reached recursive code (our encoder)
        raise HitchError("inference_protocol_unsupported", "the request nests too deeply", {}) from None


def _prepare(route: RouteName, raw: bytes, body: dict[str, Any], lock: InferenceLockV1, wire_model: str) -> PreparedRequest:
    allowed = _CHAT_KEYS if route == "/v1/chat/completions" else _RESPONSES_KEYS
    extra = body.keys() - allowed
    if extra:
        unknown = sorted(extra)
        one = {"parameter": unknown[0]} if len(unknown) == 1 else {}
        raise _conflict(f"unsupported parameter(s): {', '.join(unknown)}", parameters=unknown, **one)
    if body.get("model") != wire_model:
        raise _conflict(f"model must be {wire_model!r}", parameter="model", wire_model=wire_model)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _conflict("stream must be a boolean", parameter="stream")
    if stream and not lock.protocol.streaming:
        raise _conflict("the lock does not enable streaming", parameter="stream")
    responses = route != "/v1/chat/completions"
    if responses:
        check_responses_shape(body)
    else:
        check_chat_shape(body)
    given = dict(body)
    controls = None
    if responses:
        changed, budget, messages, tools = _responses(body, lock)
        reasoning = body.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    else:
        changed, budget, messages, tools = _chat(body, lock)
        effort = body.get("reasoning_effort")
        controls = _benchmark_controls(body, lock, budget)
    out = _rewrite(raw, given, body) if changed else raw
    kwargs = None if effort is None else {"reasoning_effort": effort}
    facts = response_facts(given, lock) if responses else None
    return PreparedRequest(out, stream, budget, messages, tools, responses, kwargs, controls, facts)


def _rewrite(raw: bytes, given: dict[str, Any], body: dict[str, Any]) -> bytes:
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
