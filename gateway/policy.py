"""The request pipeline: one caller body in, the engine's request out, or a refusal (spec §10.2).

Owns :func:`apply_policy` and :class:`PreparedRequest`. After the body is read (:func:`gateway.intake.read_body`,
the first stage), :func:`apply_policy` calls the stages in order, each once, none returning to an earlier one:

1. parse: the body is parsed once, as a JSON object (else 400 ``inference_protocol_unsupported``);
2. shape (:func:`gateway.request_shape.check_shape`): nesting, the parameter surface, every field's type,
   text-only content: what the gateway can forward at all;
3. lock (:func:`gateway.lock_check.check_against_lock`): model, streaming, sampling, budget, tools, benchmark
   controls: what the lock permits; the lock's values are pinned into the body;
4. engine (:func:`gateway.sglang_view.for_engine`): the engine's bytes and the messages and tools SGLang's chat
   template will see (the context check's input);
5. answer (:func:`gateway.responses_completion.response_facts`, Responses only): what completes the answer.

For example::

    prepared = apply_policy("/v1/chat/completions", raw, lock, "m")  # HitchError on a refusal
    prepared.body  # the caller's bytes, or with the lock's additions spliced in

The body is parsed once. When the lock changed nothing the caller's bytes are forwarded as they are; when
it only added fields they are spliced into the caller's bytes; only a replaced value re-serializes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.lock_check import check_against_lock
from gateway.request_shape import check_shape
from gateway.responses_completion import ResponseFacts, response_facts
from gateway.routes import RouteName
from gateway.sglang_view import for_engine
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError

__all__ = ["PreparedRequest", "apply_policy"]


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


def apply_policy(route: RouteName, raw: bytes, lock: InferenceLockV1, wire_model: str) -> PreparedRequest:
    """Check ``raw`` against the lock; the returned body is what the engine receives."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        body = None
    if not isinstance(body, dict):
        raise HitchError("inference_protocol_unsupported", "the request body must be a JSON object", {})
    responses = route != "/v1/chat/completions"
    try:
        check_shape(route, raw, body)
        given = dict(body)  # the caller's values, before the lock's are pinned in
        terms = check_against_lock(route, body, lock, wire_model)
        engine = for_engine(raw, given, body, responses=responses, changed=terms.changed)
        facts = response_facts(given, lock) if responses else None
    except RecursionError:  # a value nested almost to json's own limit reached recursive code (our encoder)
        raise HitchError("inference_protocol_unsupported", "the request nests too deeply", {}) from None
    return PreparedRequest(
        engine.body, terms.stream, terms.max_output_tokens, engine.messages, engine.tools, responses,
        engine.template_kwargs, terms.benchmark_controls, facts,
    )  # fmt: skip
