"""The pipeline's third stage: the request checked once against the lock (spec §10.2).

Owns :func:`check_against_lock`. The body reaching it is well formed (:mod:`gateway.request_shape`); this
stage decides what the lock permits and pins the lock's values into the body:

- ``model`` must be the binding's wire model; ``stream`` needs a lock that enables streaming.
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
  :attr:`LockTerms.benchmark_controls` for the evidence row. ``min_tokens`` may not exceed the budget.
- ``client_metadata`` (Responses; Codex's per-turn telemetry ids) is removed before forwarding: SGLang has no
  such field and would ignore it; it never affects generation.
- Server-side state (``store: true``, ``previous_response_id``, ``background``), truncation, ``n`` other
  than 1 and non-text output are refused with a code, never dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.routes import RouteName
from harness.contracts.lock import BenchmarkControl, InferenceLockV1
from harness.errors import HitchError

__all__ = ["LockTerms", "check_against_lock"]

_RESPONSES_BUDGET_HEADROOM = 2
# SGLang's defaults for the benchmark controls (its ChatCompletionRequest): a caller sending them asks for
# nothing the engine would not do anyway.
_ENGINE_DEFAULTS: dict[BenchmarkControl, bool | int] = {"ignore_eos": False, "min_tokens": 0}


@dataclass(frozen=True)
class LockTerms:
    """What the lock decided for one request (its values are pinned into the body as well)."""

    stream: bool
    max_output_tokens: int
    changed: bool  # the lock added or replaced a value in the body: the engine's bytes are not the caller's
    benchmark_controls: dict[str, bool | int] | None = None  # controls used at other than SGLang's default


def check_against_lock(route: RouteName, body: dict[str, Any], lock: InferenceLockV1, wire_model: str) -> LockTerms:
    """Check the (well-formed) ``body`` against the lock and pin the lock's values into it."""
    if body.get("model") != wire_model:
        raise _conflict(f"model must be {wire_model!r}", parameter="model", wire_model=wire_model)
    stream = body.get("stream", False)
    if stream and not lock.protocol.streaming:
        raise _conflict("the lock does not enable streaming", parameter="stream")
    if route != "/v1/chat/completions":
        budget = _responses(body, lock)
        _tools_policy(body, lock)
        return LockTerms(stream, budget, True)  # the budget is always rewritten (N + 2): the body always changes
    changed, budget = _chat(body, lock)
    tools_changed = _tools_policy(body, lock)
    controls = _benchmark_controls(body, lock, budget)
    return LockTerms(stream, budget, changed or tools_changed, controls)


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


def _tools_policy(body: dict[str, Any], lock: InferenceLockV1) -> bool:
    """Tools need a lock that enables them, function tools only; parallel calls follow the lock (True: the
    lock's value was added)."""
    tools = body.get("tools")
    changed = False
    if tools in (None, []):
        return False
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
    return changed


def _chat(body: dict[str, Any], lock: InferenceLockV1) -> tuple[bool, int]:
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
    return changed, budget


def _responses(body: dict[str, Any], lock: InferenceLockV1) -> int:
    cap = lock.generation.max_output_tokens
    _apply_sampling(body, lock, with_seed=False)
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
    elif store is not False:
        raise _conflict("store=true is not supported", parameter="store")
    given = body.get("max_output_tokens")
    budget = cap if given is None else _budget("max_output_tokens", given, cap)
    body["max_output_tokens"] = budget + _RESPONSES_BUDGET_HEADROOM
    return budget
