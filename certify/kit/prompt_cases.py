"""Agent-shaped request bodies whose prompt the gateway must count exactly as SGLang builds it (spec §10.2).

Owns ``CASES`` (route, body without model or budget) and :func:`prompt_counts`: the body goes through the
gateway's policy; the body the gateway would forward is sent to the engine with a one-token budget, and
the engine's reported prompt tokens are returned next to the tokens of the prompt the gateway's checker
renders for it. The cases cover what agents send: developer messages (SGLang folds them to labelled system
messages), multi-part contents, history tool calls with compact JSON arguments (SGLang re-serializes them),
tool schemas with HTML-special and non-ASCII text (transformers' tojson escapes neither), reasoning items,
and ``tool_choice: "none"`` (no tools in the prompt). Used by ``protocol.context.exact`` and by
tests/parity/test_prompt_count.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from gateway.context_check import ContextChecker
from gateway.policy import apply_policy
from gateway.routes import RouteName
from harness.contracts.lock import InferenceLockV1

__all__ = ["CASES", "CHAT", "RESPONSES", "SAMPLING_KEYS", "gateway_prompt_ids", "gateway_prompt_tokens", "prompt_counts"]

CHAT: RouteName = "/v1/chat/completions"
RESPONSES: RouteName = "/v1/responses"
# the lock decides these; a body recorded under another lock drops them before it is counted again
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "frequency_penalty", "presence_penalty")

_DESCRIPTION = "Runs <cmd> & returns its output; don't use 'rm'. Résumé → ok."
_PARAMS = {"type": "object", "properties": {"cmd": {"type": "string", "description": "the <command>"}}, "required": ["cmd"]}
CHAT_TOOL = {"type": "function", "function": {"name": "shell", "description": _DESCRIPTION, "parameters": _PARAMS}}
RESPONSES_TOOL = {"type": "function", "name": "shell", "description": _DESCRIPTION, "strict": False, "parameters": _PARAMS}


def _parts(*texts: str, kind: str = "input_text") -> list[dict[str, str]]:
    return [{"type": kind, "text": t} for t in texts]


CASES: dict[str, tuple[RouteName, dict[str, Any]]] = {
    "chat.plain": (CHAT, {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]}),
    "chat.parts": (CHAT, {"messages": [{"role": "user", "content": _parts("first part", "second part", kind="text")}]}),
    "chat.tools_history": (
        CHAT,
        {
            "messages": [
                {"role": "user", "content": "List the files"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd":"ls -a"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
            ],
            "tools": [CHAT_TOOL],
        },
    ),
    "chat.tool_choice_none": (
        CHAT,
        {"messages": [{"role": "user", "content": "hello"}], "tools": [CHAT_TOOL], "tool_choice": "none"},
    ),
    "responses.codex_turn": (
        RESPONSES,
        {
            "instructions": "You are a coding agent.",
            "input": [
                {"type": "message", "role": "developer", "content": _parts("Use the shell tool.")},
                {"type": "message", "role": "developer", "content": _parts("<permissions>", "sandbox: workspace-write")},
                {"type": "message", "role": "user", "content": _parts("<env>cwd=/w</env>", "List the files.")},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I should run ls."}]},
                {"type": "message", "role": "assistant", "id": "msg_1", "content": _parts("Listing.", kind="output_text")},
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "shell",
                    "arguments": '{"cmd":"ls"}',
                    "status": "completed",
                },
                {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "a.txt"},
            ],
            "tools": [RESPONSES_TOOL],
            "tool_choice": "auto",
            "reasoning": {"effort": "low"},
        },
    ),
    "responses.developer_string": (
        RESPONSES,
        {"input": [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hello"}]},
    ),
}


def gateway_prompt_ids(
    route: RouteName, body: dict[str, Any], lock: InferenceLockV1, model: str, model_dir: Path
) -> tuple[bytes, list[int]]:
    """(the body the gateway forwards, the prompt ids its context check renders) for ``body``."""
    prepared = apply_policy(route, json.dumps(body).encode(), lock, model)
    checker = ContextChecker.for_dir(model_dir)
    view = checker.view(prepared.messages, prepared.responses)
    return prepared.body, checker.encode(checker.render(view, prepared.tools, prepared.template_kwargs))


def gateway_prompt_tokens(
    route: RouteName, body: dict[str, Any], lock: InferenceLockV1, model: str, model_dir: Path
) -> tuple[bytes, int]:
    """(the body the gateway forwards, the exact prompt tokens its context check counts) for ``body``."""
    forwarded, ids = gateway_prompt_ids(route, body, lock, model, model_dir)
    return forwarded, len(ids)


def prompt_counts(
    engine_url: str, headers: dict[str, str], model: str, model_dir: Path, lock: InferenceLockV1, case: str
) -> tuple[int, int]:
    """(the gateway's exact prompt tokens, the engine's reported prompt tokens) for one case."""
    route, body = CASES[case]
    budget = {"max_tokens": 1} if route == CHAT else {"max_output_tokens": 1}
    forwarded, ours = gateway_prompt_tokens(route, {"model": model, **body, **budget}, lock, model, model_dir)
    r = httpx.post(
        engine_url + route,
        content=forwarded,
        headers={**headers, "Content-Type": "application/json"},
        timeout=600,
    )
    if r.status_code != 200:
        raise AssertionError(f"{case}: the engine answered {r.status_code}: {r.text[:500]}")
    usage = r.json()["usage"]
    return ours, int(usage["prompt_tokens"] if route == CHAT else usage["input_tokens"])
