"""What the Codex checks of ``agents`` (certify/suites/test_agents.py) read and diagnose: the tool calls a Responses
stream emitted, a prompt longer than the lock's context, and why the engine answered one of Codex's requests with no
output item (:func:`empty_answer_diagnosis`: the model's own end of turn, or a field that triggers it).

Example::

    prompt, tokens = over_context_prompt(env, lock)  # by the model's own tokenizer
"""

from __future__ import annotations

from typing import Any

import httpx

from certify.reference_set import reference_continuation
from certify.session import CertifyEnv
from gateway.sse import parse_events
from harness.app.inventory import model_files
from harness.contracts.lock import InferenceLockV1

__all__ = ["call_ids", "empty_answer_diagnosis", "over_context_prompt"]


def call_ids(sse: bytes) -> list[str]:
    ids = []
    for event in parse_events(sse):
        if '"response.output_item.done"' in event.data:
            item = event.json().get("item") or {}
            if item.get("type") == "function_call":
                ids.append(item["call_id"])
    return ids


def over_context_prompt(env: CertifyEnv, lock: InferenceLockV1) -> tuple[str, int]:
    """A prompt whose text alone is longer than the lock's context, by the model's own tokenizer; (prompt, tokens)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_files(env.root, env.model_id) / "tokenizer.json"))
    context = lock.execution.context_tokens_per_request
    prompt = "Repeat these numbers back:" + " 7" * (context + 64)
    tokens = len(tokenizer.encode(prompt).ids)
    assert tokens > context, f"the prompt is {tokens} tokens, not over the context {context}"
    return prompt, tokens


# Codex fields whose removal is tried when the engine answers one of Codex's requests with no output item.
_EMPTY_ANSWER_PROBES: dict[str, tuple[str, ...]] = {
    "tools": ("tools", "tool_choice", "parallel_tool_calls"),
    "input[].role=developer": (),
    "reasoning/include": ("reasoning", "include"),
}
_REFERENCE_TOKENS = 4  # enough to show what the reference says instead when it does not end at once


def empty_answer_diagnosis(env: CertifyEnv, body: dict[str, Any], prompt_ids: list[int]) -> dict[str, Any]:
    """Why the engine answered ``body`` with no output item.

    Re-sent greedy (temperature 0) the engine must end again after one output token (its end-of-turn, which
    SGLang does not show); the reference, greedy on ``prompt_ids`` (the gateway's rendering of the same
    request, whose count the check compares with the engine's), must end its turn at its first token. Both:
    ``model_answer`` (the model ends its turn at once; the endpoint is faithful). Then each probed field is
    removed in turn: those whose removal brings an answer back are what triggers it."""

    def answer(probe: dict[str, Any]) -> dict[str, Any]:
        url = env.engine_url + "/v1/responses"
        r = httpx.post(url, json={**probe, "stream": False}, headers=env.engine_headers(), timeout=600)
        if r.status_code != 200:
            return {"http_status": r.status_code}
        resp = r.json()
        return {"items": [i.get("type") for i in resp.get("output") or []], "output_tokens": resp["usage"]["output_tokens"]}

    greedy_body = {**body, "temperature": 0.0, "top_p": 1.0}
    seen = {"as sent": answer(body), "greedy": answer(greedy_body)}
    greedy = seen["greedy"]
    engine_ends = greedy.get("items") == [] and greedy.get("output_tokens") == 1
    reference: dict[str, Any] | None = None
    if env.engine == "sglang" and prompt_ids:
        ref = reference_continuation(env.root, env.model_id, prompt_ids, _REFERENCE_TOKENS)
        reference = {"token_ids": ref.token_ids, "text": ref.text, "finish_reason": ref.finish_reason}
    reference_ends = reference is not None and reference["finish_reason"] == "stop" and len(reference["token_ids"]) == 1
    for name, keys in _EMPTY_ANSWER_PROBES.items():
        if name == "input[].role=developer":
            probe = {**greedy_body, "input": [i for i in body.get("input") or [] if i.get("role") != "developer"]}
        else:
            probe = {k: v for k, v in greedy_body.items() if k not in keys}
        seen[f"without {name}"] = answer(probe)
    fields = [name for name in _EMPTY_ANSWER_PROBES if seen[f"without {name}"].get("items")]
    if reference is None:
        verdict = "no reference to tell the model's answer from the engine's (the fake engine)"
    elif engine_ends and reference_ends:
        verdict = (
            "the model's own answer: greedy, the engine ends after one output token (its end-of-turn, no item) and "
            f"transformers on the same {len(prompt_ids)} prompt tokens ends its turn at its first token too"
        )
    elif not engine_ends:
        verdict = f"the engine answers the same request greedy with {greedy}: the empty answer is not the model's end of turn"
    else:
        verdict = (
            f"the engine ends at once but transformers on the same prompt continues with {reference['text']!r} "
            f"({reference['token_ids']}): the engine diverges from the reference"
        )
    cause = f"{verdict}; it answers when the request is sent without: {', '.join(fields) or 'none of the probed fields'}"
    return {
        "model_answer": engine_ends and reference_ends,
        "cause": cause,
        "fields": ", ".join(fields) or None,
        "reference": reference,
        "probes": seen,
    }
