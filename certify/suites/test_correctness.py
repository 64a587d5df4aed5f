"""correctness: what the endpoint generates is what the checkpoint should generate.

Every request goes through the gateway with the run's token; the reference is Hugging Face transformers on
the same checkpoint (the store's copy of ``model_id``), run in the reference runtime's venv and cached per
model and prompt set (:mod:`fixtures.reference`). The session computes it before it starts the engine
(:func:`certify.reference_set.prepare_references`); the prompt sets live in :mod:`certify.reference_set`.
Checks:

- ``correctness.parity.{chat,responses}``: greedy parity on eight fixed prompts, 32 tokens each, compared
  token by token (:func:`certify.kit.correctness.compare_greedy`, the method of SGLang's and
  vLLM's ``check_logprobs_close``), with the engine's logprobs and top-5 asked through the gateway;
- ``correctness.prompt_tokens``: the prompt token count the engine reports equals the reference tokenizer's
  ``apply_chat_template`` ids, for every prompt on both APIs;
- ``correctness.determinism``: three identical temperature-0 requests give identical tokens;
- ``correctness.natural_stop``: where the reference ends its turn on the end-of-turn token, the engine ends
  it too (finish_reason ``stop`` / status ``completed``, the same last token);
- ``correctness.continuations`` (both engines): the greedy continuations of the parity prompts on both APIs,
  recorded token by token with their logprobs where the engine gives them (text otherwise), each non-empty and
  as long as the engine's usage says; the record ``hitch catalog reproduce`` compares two runs by
  (:mod:`certify.entry_compare`);
- ``correctness.eval``: 22 short questions with one-word answers, scored on the engine and the reference by
  normalised exact match (:func:`certify.kit.correctness.answer_matches`: NFKC, case-folded,
  punctuation dropped; an accepted answer occurs as whole words in the answer's first line, so "The capital of
  France is Paris." is right and "Parisian" is not); the engine may not score below the reference minus
  :data:`EVAL_MARGIN`, and where the model can answer questions the reference must answer at least
  :data:`EVAL_MIN_REFERENCE` (a set the reference cannot answer would pass any engine).

Tolerances (natural-log units, nats) and why:

- :data:`MATCH_TOL` = 0.25: where both sides chose the same token its logprob may differ by this much. The
  engine computes in the checkpoint's bfloat16 (8 bits of mantissa: a relative error of ~0.4 % per op,
  accumulated over the layers), the reference upcasts the same weights to float32; SGLang's own model tests
  allow 5e-2 on float16 prefill logprobs of larger models, bfloat16 on CPU kernels drifts further on a long
  decode, so 0.25 nats (a probability off by a factor of 1.28) separates kernel noise from a wrong model (a
  wrong weight, template or position id moves logprobs by whole nats).
- :data:`TIE_TOL` = 0.5: at a divergence each side's preference for its own token over the other's must be
  within this; greedy continuations may part where the two best tokens are within kernel noise of each
  other, never where one side is clearly sure (vLLM checks top-k membership only; the gap makes it strict).
- :data:`EVAL_MARGIN` = 3 of 22: a near tie flipped by kernel noise changes an answer of a small model.
  Measured on SmolLM2-135M (generic-CPU SGLang, bfloat16, against the float32 reference): reference 14,
  engine 12 (two answers parted at a near tie after identical prefixes); one more answer of headroom for
  other CPU kernels (AMX). A wrong engine loses far more (a wrong weight, template or position id answers
  almost nothing), and :data:`EVAL_MIN_REFERENCE` = 10 keeps the comparison meaningful: the engine must
  still answer at least 7 of 22.

Requests carry no sampling: the gateway sends the lock's (temperature 0 on a greedy lock, the default). The
checks that compare with the greedy reference or with another greedy answer (parity, determinism, natural stop,
the question set, the recorded continuations) need a greedy lock: on a lock that samples (a generation profile
with temperature above 0, ``pytest certify --generation balanced``) each records ``not_applicable`` with the
reason (:func:`certify.kit.correctness.greedy_only`) and sends nothing; the prompt token count holds on any lock.

What a model cannot show is read from the model-fixture catalog's ``not_applicable`` (a random checkpoint
never ends a turn by itself and answers no question): the check still runs, records
``details.not_applicable`` with the catalog's reason and passes; the evaluator names it in the entry's
reasons (``<check>: not applicable to this model: ...``), so it is declared, never silently skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from certify.kit.correctness import (
    MATCH_TOL,
    TIE_TOL,
    Comparison,
    EngineToken,
    TokenKeys,
    answer_matches,
    chat_tokens,
    compare_greedy,
    continuation,
    greedy_only,
    responses_tokens,
)
from certify.kit.requests import gw_post
from certify.reference_set import (
    EVAL_SET,
    EVAL_TOKENS,
    PARITY_PROMPTS,
    PARITY_TOKENS,
    STOP_QUESTION,
    STOP_TOKENS,
    TOP_K,
    chat_messages,
    eval_messages,
    not_applicable,
    reference_run,
)
from certify.registry import check
from certify.session import CertifyEnv
from fixtures.reference import ReferenceRunV1
from harness.app.inventory import model_files
from harness.app.locks import sealed_lock
from harness.contracts.lock import SamplingV1

EVAL_MARGIN = 3
EVAL_MIN_REFERENCE = 10


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, f"{r.status_code}: {r.text[:500]}"
    body = r.json()
    assert isinstance(body, dict)
    return body


class Bench:
    """The engine's answers through the gateway, and the reference's (computed before the engine started)."""

    def __init__(self, env: CertifyEnv) -> None:
        self.env = env
        self.keys = TokenKeys(model_files(env.root, env.model_id))
        self.sampling: SamplingV1 = sealed_lock(env.root, env.run.inference_id).generation

    def greedy_only(self, certify_record: Any, what: str) -> bool:
        """False, recording ``not_applicable`` with the reason, when the lock samples (``what`` sampling breaks)."""
        reason = greedy_only(self.sampling, what)
        if reason is not None:
            certify_record.detail("not_applicable", reason)
        return reason is None

    def reference(self, name: str) -> ReferenceRunV1:
        # normally a cache hit: the session prepared every set before it started the engine
        run, _ = reference_run(self.env.root, self.env.model_id, name)
        return run

    def chat(self, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        body = {"model": self.env.run.wire_model, "messages": messages, "max_tokens": max_tokens,
                "logprobs": True, "top_logprobs": TOP_K}  # fmt: skip
        return _ok(gw_post(self.env.run, "/chat/completions", body))

    def responses(self, text: str, max_tokens: int) -> dict[str, Any]:
        body = {"model": self.env.run.wire_model, "input": [{"role": "user", "content": text}],
                "max_output_tokens": max_tokens, "top_logprobs": TOP_K, "include": ["message.output_text.logprobs"]}  # fmt: skip
        return _ok(gw_post(self.env.run, "/responses", body))


@pytest.fixture(scope="module")
def bench(certify_env: CertifyEnv) -> Bench:
    return Bench(certify_env)


@pytest.fixture(scope="module")
def parity_ref(bench: Bench) -> ReferenceRunV1:
    return bench.reference("parity")


@pytest.fixture(scope="module")
def parity_answers(bench: Bench) -> dict[str, list[dict[str, Any]]]:
    return {
        "chat": [bench.chat(chat_messages(p), PARITY_TOKENS) for p in PARITY_PROMPTS],
        "responses": [bench.responses(p, PARITY_TOKENS) for p in PARITY_PROMPTS],
    }


def _tokens(api: str, answer: dict[str, Any]) -> list[EngineToken]:
    return chat_tokens(answer) if api == "chat" else responses_tokens(answer)


@check(
    "correctness.parity.{api}",
    engines=("sglang",),
    params={"api": ("chat", "responses")},
    description="greedy {api} continuations match the transformers reference token by token (top-k, logprob gaps)",
    summary=lambda d: (
        f"greedy tokens and top-k logprobs match transformers on {d['figures']['prompts']} prompts "
        f"({d['figures']['positions_compared']} positions; max gap {d['figures']['max_logprob_gap']}, "
        f"{d['figures']['divergences']} divergence(s) within the tie tolerance)"
    ),
)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_greedy_parity(
    api: str, bench: Bench, parity_ref: ReferenceRunV1, parity_answers: dict[str, list[dict[str, Any]]], certify_record: Any
) -> None:
    if not bench.greedy_only(certify_record, "its tokens are not the reference's greedy continuation"):
        return
    key: Callable[[int], Any] = bench.keys.raw_bytes if api == "chat" else bench.keys.display
    rows: list[dict[str, Any]] = []
    results: list[Comparison] = []
    for prompt, answer, ref in zip(PARITY_PROMPTS, parity_answers[api], parity_ref.results, strict=True):
        tokens = _tokens(api, answer)
        assert tokens, f"{api}: no logprobs in the answer to {prompt!r}"
        # Responses key their top_logprobs by display text: fragments of multi-byte characters (all U+FFFD) merge
        width = {len(t.top) for t in tokens}
        assert width == {TOP_K} if api == "chat" else width <= set(range(1, TOP_K + 1)), f"{api}: top_logprobs widths {width}"
        result = compare_greedy(tokens, ref, key, match_tol=MATCH_TOL, tie_tol=TIE_TOL)
        results.append(result)
        rows.append({"prompt": prompt[:40], "engine_tokens": len(tokens), "reference_tokens": len(ref.token_ids),
                     "compared": result.compared, "diverged_at": result.diverged_at,
                     "max_match_gap": round(result.max_match_gap, 4), "tie_gap": result.tie_gap,
                     "problems": result.problems})  # fmt: skip
    figures = {
        "prompts": len(rows),
        "positions_compared": sum(r.compared for r in results),
        "max_logprob_gap": round(max(r.max_match_gap for r in results), 4),
        "divergences": sum(r.diverged_at is not None for r in results),
        "match_tolerance": MATCH_TOL,
        "tie_tolerance": TIE_TOL,
        "reference_seconds": parity_ref.seconds,
    }
    certify_record.detail("figures", figures)
    certify_record.detail("prompts", rows)
    certify_record.metric(f"correctness_parity_{api}", figures)
    problems = [f"{r['prompt']}: {p}" for r in rows for p in r["problems"]]
    assert not problems, problems


@check(
    "correctness.continuations",
    description="greedy continuations of the parity prompts on both APIs, recorded token by token for reproduction",
    summary=lambda d: (
        f"the {len(d['continuations'])} greedy continuations of the parity prompts (chat and Responses) are recorded"
        + (" token by token with their logprobs" if any(r["tokens"] for r in d["continuations"]) else " as text")
        + ", each as long as the engine's usage says"
    ),
)
def test_greedy_continuations_recorded(
    bench: Bench, parity_answers: dict[str, list[dict[str, Any]]], certify_record: Any
) -> None:
    if not bench.greedy_only(certify_record, "two runs' continuations differ by design, so none reproduces"):
        return
    rows: list[dict[str, Any]] = []
    for api in ("chat", "responses"):
        for i, (prompt, answer) in enumerate(zip(PARITY_PROMPTS, parity_answers[api], strict=True)):
            rows.append({"api": api, "prompt": i, "prompt_text": prompt[:60], **continuation(api, answer)})
    certify_record.detail("continuations", rows)
    certify_record.detail("max_tokens", PARITY_TOKENS)
    problems = []
    for row in rows:
        where = f"{row['api']} prompt {row['prompt']}"
        if not row["text"] and not row["tokens"]:
            problems.append(f"{where}: an empty continuation")
        if not isinstance(row["output_tokens"], int) or not 1 <= row["output_tokens"] <= PARITY_TOKENS:
            problems.append(f"{where}: usage says {row['output_tokens']!r} output tokens (asked {PARITY_TOKENS})")
        elif row["tokens"] is not None and len(row["tokens"]) != row["output_tokens"]:
            problems.append(f"{where}: {len(row['tokens'])} tokens with logprobs, usage says {row['output_tokens']}")
    assert not problems, problems


@check(
    "correctness.prompt_tokens",
    engines=("sglang",),
    description="the engine's prompt token count equals apply_chat_template",
    summary="the prompt token counts of chat and Responses equal the chat template's on all {prompts} prompts",
)
def test_prompt_tokens(parity_ref: ReferenceRunV1, parity_answers: dict[str, list[dict[str, Any]]], certify_record: Any) -> None:
    mismatches: list[str] = []
    for prompt, chat, resp, ref in zip(
        PARITY_PROMPTS, parity_answers["chat"], parity_answers["responses"], parity_ref.results, strict=True
    ):
        want = len(ref.prompt_token_ids)
        got = (chat["usage"]["prompt_tokens"], resp["usage"]["input_tokens"])
        if got != (want, want):
            mismatches.append(f"{prompt[:40]}: chat {got[0]}, responses {got[1]}, apply_chat_template {want}")
    certify_record.detail("prompts", len(PARITY_PROMPTS))
    assert not mismatches, mismatches


@check(
    "correctness.determinism",
    engines=("sglang",),
    description="three identical temperature-0 requests give identical tokens (greedy locks only)",
    summary=lambda d: f"three greedy runs of one prompt gave identical tokens ({d['tokens'][0]} each)",
)
def test_determinism(bench: Bench, certify_record: Any) -> None:
    if not bench.greedy_only(certify_record, "identical requests may differ"):
        return
    messages = chat_messages(PARITY_PROMPTS[0])
    runs = [[t.key for t in chat_tokens(bench.chat(messages, PARITY_TOKENS))] for _ in range(3)]
    certify_record.detail("tokens", [len(r) for r in runs])
    assert runs[0], "no tokens"
    assert runs[0] == runs[1] == runs[2], "temperature-0 requests gave different tokens"


@pytest.fixture(scope="module")
def eval_ref(bench: Bench) -> ReferenceRunV1:
    return bench.reference("eval")


@check(
    "correctness.natural_stop",
    engines=("sglang",),
    description="the engine ends its turn where the reference does",
    summary="the engine ended its turn where the reference did ({engine_tokens} tokens; reference {reference_tokens})",
)
def test_natural_stop(bench: Bench, certify_record: Any) -> None:
    if not bench.greedy_only(certify_record, "where it ends its turn is not the greedy reference's"):
        return
    reason = not_applicable(bench.env.model_id, "natural_stop")
    if reason is not None:
        certify_record.detail("not_applicable", reason)
        return
    ref = bench.reference("natural_stop").results[0]
    assert ref.finish_reason == "stop", f"the reference did not end its turn in {STOP_TOKENS} tokens: {ref.text!r}"
    chat = bench.chat(chat_messages(STOP_QUESTION), STOP_TOKENS)
    resp = bench.responses(STOP_QUESTION, STOP_TOKENS)
    tokens = chat_tokens(chat)
    certify_record.detail("reference_tokens", len(ref.token_ids))
    certify_record.detail("engine_tokens", len(tokens))
    assert chat["choices"][0]["finish_reason"] == "stop", chat["choices"][0]
    assert tokens and tokens[-1].key == bench.keys.raw_bytes(ref.token_ids[-1]), (
        "the engine did not stop on the end-of-turn token"
    )
    assert resp["status"] == "completed", resp.get("incomplete_details")


@check(
    "correctness.eval",
    engines=("sglang",),
    description=f"{len(EVAL_SET)} short questions, normalised exact match: engine >= reference - {EVAL_MARGIN}",
    summary=(
        "question set: the engine answered {score[engine]} of {score[items]} right, the reference "
        "{score[reference]} (margin {score[margin]})"
    ),
)
def test_question_set(bench: Bench, eval_ref: ReferenceRunV1, certify_record: Any) -> None:
    if not bench.greedy_only(certify_record, "its answers are not scored against the greedy reference's"):
        return
    engine_answers = [
        str(bench.chat(eval_messages(q), EVAL_TOKENS)["choices"][0]["message"].get("content") or "") for q, _ in EVAL_SET
    ]
    engine_ok = [answer_matches(a, accepted) for a, (_, accepted) in zip(engine_answers, EVAL_SET, strict=True)]
    ref_ok = [answer_matches(r.text, accepted) for r, (_, accepted) in zip(eval_ref.results, EVAL_SET, strict=True)]
    score = {"engine": sum(engine_ok), "reference": sum(ref_ok), "items": len(EVAL_SET), "margin": EVAL_MARGIN}
    certify_record.metric("correctness_eval", score)
    certify_record.detail("score", score)
    certify_record.detail("match", "normalised exact match (certify.kit.correctness.answer_matches)")
    certify_record.detail(
        "answers",
        [
            {"question": q, "accepted": list(accepted), "engine": a, "engine_ok": e, "reference": r.text, "reference_ok": o}
            for (q, accepted), a, e, r, o in zip(EVAL_SET, engine_answers, engine_ok, eval_ref.results, ref_ok, strict=True)
        ],
    )
    reason = not_applicable(bench.env.model_id, "question_answering")
    if reason is not None:  # scored all the same (0 and 0 on random weights): the figures say what ran
        certify_record.detail("not_applicable", reason)
    else:  # a set the reference cannot answer compares nothing: it would pass any engine
        assert score["reference"] >= EVAL_MIN_REFERENCE, (
            f"the reference answers {score['reference']} of {len(EVAL_SET)} (< {EVAL_MIN_REFERENCE}): the question set "
            "cannot tell a wrong engine from a right one; declare question_answering not applicable for this model"
        )
    engine, reference = score["engine"], score["reference"]
    assert engine >= reference - EVAL_MARGIN, f"engine {engine}/{len(EVAL_SET)} < reference {reference} - {EVAL_MARGIN}"
