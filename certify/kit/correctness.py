"""Helpers of the correctness suite: token keys, the greedy-parity comparison, the question set's scoring.

Real SGLang names its tokens in logprobs two ways: chat completions give each token's raw ``bytes`` (the
GPT-2 byte decoder applied to the vocabulary piece, ``token_id_to_bytes`` in SGLang 0.5.23) and Responses
give its display text (``tokenizer.batch_decode([[id]])``, so a fragment of a multi-byte character is
U+FFFD). :class:`TokenKeys` computes both from the checkpoint's ``tokenizer.json`` for the reference's ids,
so engine and reference tokens are compared in the engine's own terms.

:func:`compare_greedy` is the method of SGLang's and vLLM's model tests (``check_logprobs_close``): walk both
greedy continuations; while the tokens agree, the chosen token's logprobs must agree within a tolerance; at
the first divergence both tokens must be in the other side's top-k and the side that chose differently must
see the two as a near tie (logprob gap within a tolerance); after a divergence the contexts differ, so the
comparison ends there.

:func:`greedy_only` says why a check that needs greedy decoding does not apply to a lock that samples: the gateway
refuses a request's other sampling (``inference_parameter_conflict``), so such a check cannot ask for temperature 0,
and a sampled lock's answers differ from the reference's and from each other by design.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from fixtures.reference import ReferencePromptResult
from harness.contracts.lock import SamplingV1

__all__ = [
    "MATCH_TOL",
    "TIE_TOL",
    "Comparison",
    "EngineToken",
    "TokenKeys",
    "answer_matches",
    "answer_words",
    "chat_tokens",
    "compare_greedy",
    "continuation",
    "greedy_only",
    "responses_tokens",
]

# the correctness suite's tolerances (nats), explained in its docstring (certify/suites/test_correctness.py); the
# reproduction of an entry (certify.entry_compare) holds two runs' logprobs of the same token to MATCH_TOL too
MATCH_TOL = 0.25
TIE_TOL = 0.5


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's ``bytes_to_unicode`` inverted: vocabulary character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


# transformers' ``clean_up_tokenization``: what a decode does when the tokenizer config asks for it
_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # fmt: skip


class TokenKeys:
    """The engine's names of a token id, from the checkpoint's tokenizer (byte-level BPE)."""

    def __init__(self, checkpoint: Path) -> None:
        self._tok = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
        config = json.loads((checkpoint / "tokenizer_config.json").read_text(encoding="utf-8"))
        self._cleanup = bool(config.get("clean_up_tokenization_spaces", False))

    def raw_bytes(self, token_id: int) -> tuple[int, ...]:
        """What SGLang's chat logprobs put in ``bytes``."""
        piece = self._tok.id_to_token(token_id)
        decoder = _byte_decoder()
        if piece is not None and piece and all(ch in decoder for ch in piece):
            return tuple(decoder[ch] for ch in piece)
        return tuple(self.display(token_id).encode("utf-8"))

    def display(self, token_id: int) -> str:
        """What SGLang's Responses logprobs put in ``token`` (one id decoded alone, specials kept)."""
        text = self._tok.decode([token_id], skip_special_tokens=False)
        if self._cleanup:
            for old, new in _CLEANUPS:
                text = text.replace(old, new)
        return text


@dataclass(frozen=True)
class EngineToken:
    key: Any  # bytes tuple (chat) or display text (Responses)
    logprob: float
    top: dict[Any, float]


def chat_tokens(body: dict[str, Any]) -> list[EngineToken]:
    """The generated tokens of a non-streamed chat completion asked with ``logprobs`` and ``top_logprobs``."""
    content = ((body["choices"][0].get("logprobs") or {}).get("content")) or []
    return [
        EngineToken(tuple(t["bytes"]), float(t["logprob"]), {tuple(x["bytes"]): float(x["logprob"]) for x in t["top_logprobs"]})
        for t in content
    ]


def responses_tokens(resp: dict[str, Any]) -> list[EngineToken]:
    """The generated tokens of a Responses answer asked with ``include: [message.output_text.logprobs]``."""
    out: list[EngineToken] = []
    for item in resp.get("output") or []:
        for part in item.get("content") or [] if item.get("type") == "message" else []:
            for t in part.get("logprobs") or []:
                out.append(
                    EngineToken(t["token"], float(t["logprob"]), {x["token"]: float(x["logprob"]) for x in t["top_logprobs"]})
                )
    return out


def _token_name(key: Any) -> str:
    """A token's name in a record: chat's raw bytes as hex (``b:`` prefixed), Responses' display text as it is."""
    return "b:" + bytes(key).hex() if isinstance(key, tuple) else str(key)


def continuation(api: str, answer: dict[str, Any]) -> dict[str, Any]:
    """What a greedy answer generated, for the record: text, the engine's output token count and finish, and the
    tokens with their logprobs when the engine gave them (``None`` when it did not: the fake engine)."""
    if api == "chat":
        choice = answer["choices"][0]
        text, finish = str(choice["message"].get("content") or ""), choice.get("finish_reason")
        used = (answer.get("usage") or {}).get("completion_tokens")
        tokens = chat_tokens(answer)
    else:
        parts = [c for item in answer.get("output") or [] if item.get("type") == "message" for c in item.get("content") or []]
        text, finish = "".join(str(c.get("text") or "") for c in parts), answer.get("status")
        usage = answer.get("usage") or {}
        used = usage.get("output_tokens", usage.get("completion_tokens"))
        tokens = responses_tokens(answer)
    return {
        "text": text,
        "finish": finish,
        "output_tokens": used,
        "tokens": [_token_name(t.key) for t in tokens] if tokens else None,
        "logprobs": [round(t.logprob, 5) for t in tokens] if tokens else None,
    }


@dataclass
class Comparison:
    compared: int = 0  # positions where both sides chose the same token
    diverged_at: int | None = None
    max_match_gap: float = 0.0  # largest |engine - reference| logprob of an agreed token
    tie_gap: float | None = None  # at the divergence: the larger of the two sides' preference for their own token
    problems: list[str] = field(default_factory=list)


def compare_greedy(
    engine: list[EngineToken], ref: ReferencePromptResult, key: Any, *, match_tol: float, tie_tol: float
) -> Comparison:
    """Compare one greedy continuation of the engine with the reference's (``key``: id -> engine token name)."""
    result = Comparison()
    for i, (mine, ref_id) in enumerate(zip(engine, ref.token_ids, strict=False)):
        ref_key = key(ref_id)
        # keyed like SGLang's Responses top_logprobs: most likely first, a later equal name overwrites
        ref_top = {key(t.id): t.logprob for t in ref.top_logprobs[i]}
        if mine.key == ref_key:
            ref_lp = next(t.logprob for t in ref.top_logprobs[i] if t.id == ref_id)
            gap = abs(mine.logprob - ref_lp)
            result.max_match_gap = max(result.max_match_gap, gap)
            if gap > match_tol:
                result.problems.append(f"position {i}: token {ref_key!r} logprob {mine.logprob:.4f} vs {ref_lp:.4f}")
            result.compared += 1
            continue
        result.diverged_at = i
        if ref_key not in mine.top:
            result.problems.append(f"position {i}: the reference's {ref_key!r} is not in the engine's top-{len(mine.top)}")
        if mine.key not in ref_top:
            result.problems.append(f"position {i}: the engine's {mine.key!r} is not in the reference's top-{len(ref_top)}")
        if not result.problems:
            gaps = (ref_top[ref_key] - ref_top[mine.key], mine.top[mine.key] - mine.top[ref_key])
            result.tie_gap = max(gaps)
            if result.tie_gap > tie_tol:
                result.problems.append(f"position {i}: {mine.key!r} vs {ref_key!r} is no near tie (gap {result.tie_gap:.4f})")
        return result
    if len(engine) != len(ref.token_ids):
        result.problems.append(
            f"the engine generated {len(engine)} tokens, the reference {len(ref.token_ids)}, with no divergence"
        )
    return result


def answer_words(text: str) -> list[str]:
    """The words of ``text``'s first non-empty line: NFKC, case-folded, every punctuation character a space."""
    line = next((ln for ln in unicodedata.normalize("NFKC", text).casefold().splitlines() if ln.strip()), "")
    return "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in line).split()


def answer_matches(answer: str, accepted: tuple[str, ...]) -> bool:
    """Normalised exact match: one accepted answer's words occur as consecutive whole words in the answer's first line.

    "The capital of France is Paris." matches ``("Paris",)``; "Parisian" or "Par is" do not, nor does an answer
    that only names it on a later line (the question asks for one word; a list of guesses is no answer).
    """
    words = answer_words(answer)
    for expected in accepted:
        want = answer_words(expected)
        if want and any(words[i : i + len(want)] == want for i in range(len(words) - len(want) + 1)):
            return True
    return False


def greedy_only(sampling: SamplingV1, what: str) -> str | None:
    """Why a check that needs greedy decoding does not apply under this lock's sampling (None: a greedy lock, where
    it applies); ``what`` says what sampling breaks for the check ("identical requests may differ")."""
    if sampling.greedy:
        return None
    return (
        f"the lock samples (temperature {sampling.temperature}, top_p {sampling.top_p}): {what}; certified on greedy locks only"
    )
