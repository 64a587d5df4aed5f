"""The correctness suite's fixed prompt sets and their reference runs, prepared before the engine starts.

The reference (Hugging Face transformers on the certified checkpoint, :mod:`fixtures.reference`) is
deterministic per ``model_id`` and prompt set and is cached under ``$HITCH_ROOT/cache/reference`` keyed by
both. It must be computed while no engine runs: SGLang's CPU scheduler spins one of two cores even when
idle, so a reference computed beside it takes about twice as long. :func:`prepare_references` is therefore
called by the certify session (:func:`certify.session.open_session`) after the model is imported and before
the engine is started, under a file mutex so xdist workers compute it once; the suite then only reads the
cache (:func:`reference_run`).

Owns the prompt sets (:data:`PARITY_PROMPTS`, :data:`EVAL_SET`, the natural-stop question; their texts are
data, ``reference_prompts.json`` beside this module) and their budgets; the checks and their tolerances live
in ``certify/suites/test_correctness.py``. A set is identified by the digest of its rendered prompts
(:func:`fixtures.reference.prompt_set_digest`, part of the reference cache key), whichever file they come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import Field, StringConstraints, model_validator

from catalog.model_fixtures import fixture_for_model_id
from fixtures.reference import (
    REFERENCE_RUNTIME,
    Prompt,
    ReferenceParams,
    ReferencePromptResult,
    ReferenceRunV1,
    reference_cache_dir,
    run_references,
)
from harness.app.inventory import installed_runtime_named, model_files
from harness.contracts.base import Record
from harness.paths import HitchRoot, ensure_private_dir

__all__ = [
    "EVAL_SET",
    "EVAL_SYSTEM",
    "EVAL_TOKENS",
    "PROMPTS",
    "PARITY_PROMPTS",
    "PARITY_TOKENS",
    "REFERENCE_SETS",
    "STOP_QUESTION",
    "STOP_TOKENS",
    "EvalItemV1",
    "TOP_K",
    "ReferencePromptsV1",
    "ReferenceSet",
    "chat_messages",
    "eval_messages",
    "load_prompts",
    "not_applicable",
    "prepare_references",
    "reference_continuation",
    "reference_run",
]

Message = dict[str, Any]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]

PARITY_TOKENS = 32
TOP_K = 5
EVAL_TOKENS = 12
STOP_TOKENS = 48

PROMPTS_PATH = Path(__file__).with_name("reference_prompts.json")


class EvalItemV1(Record):
    """One eval question and its accepted answers (a number also in digits), scored by normalised exact match
    (:func:`certify.kit.correctness.answer_matches`)."""

    question: NonEmpty
    accepted: tuple[NonEmpty, ...] = Field(min_length=1)


class ReferencePromptsV1(Record):
    """The prompt sets' texts, as shipped in :data:`PROMPTS_PATH` (validated when this module is imported)."""

    # user-only prompts: chat and Responses render them through the same template (no system folding)
    parity_prompts: list[NonEmpty] = Field(min_length=1)
    stop_question: NonEmpty
    eval_system: NonEmpty
    # common knowledge a 135M instruct model can answer, each with one short answer that the question does not
    # contain, so an answer that repeats the question never matches
    eval_set: list[EvalItemV1] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        for name, texts in (("parity_prompts", self.parity_prompts), ("eval_set", [i.question for i in self.eval_set])):
            if len(set(texts)) != len(texts):
                raise ValueError(f"{name} repeats a prompt")
        return self


def load_prompts(path: Path = PROMPTS_PATH) -> ReferencePromptsV1:
    return ReferencePromptsV1.model_validate_json(path.read_bytes())


PROMPTS = load_prompts()
PARITY_PROMPTS = PROMPTS.parity_prompts
STOP_QUESTION = PROMPTS.stop_question
EVAL_SYSTEM = PROMPTS.eval_system
EVAL_SET: list[tuple[str, tuple[str, ...]]] = [(item.question, item.accepted) for item in PROMPTS.eval_set]


def chat_messages(text: str, system: str | None = None) -> list[Message]:
    return [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": text}]


def eval_messages(question: str) -> list[Message]:
    return chat_messages(question, EVAL_SYSTEM)


@dataclass(frozen=True)
class ReferenceSet:
    """One prompt set the suite compares with the reference, and the behaviour it needs (if any)."""

    name: str
    prompts: list[list[Message]]
    max_new_tokens: int
    behaviour: str | None = None  # a model declaring this not applicable never needs the set

    @property
    def params(self) -> ReferenceParams:
        return ReferenceParams(max_new_tokens=self.max_new_tokens, top_k=TOP_K)


REFERENCE_SETS = {
    s.name: s
    for s in (
        ReferenceSet("parity", [chat_messages(p) for p in PARITY_PROMPTS], PARITY_TOKENS),
        ReferenceSet("eval", [eval_messages(q) for q, _ in EVAL_SET], EVAL_TOKENS),
        ReferenceSet("natural_stop", [chat_messages(STOP_QUESTION)], STOP_TOKENS, behaviour="natural_stop"),
    )
}


def not_applicable(model_id: str, behaviour: str) -> str | None:
    """The model-fixture catalog's reason why ``model_id`` cannot show ``behaviour``, if it declares one."""
    entry = fixture_for_model_id(model_id)
    return None if entry is None else entry.not_applicable.get(behaviour)  # type: ignore[call-overload]


def reference_run(root: HitchRoot, model_id: str, name: str) -> tuple[ReferenceRunV1, bool]:
    """The reference result of the set ``name`` for ``model_id`` (imported in ``root``), and whether it was cached."""
    ref = REFERENCE_SETS[name]
    return _runs(root, model_id, [(list(ref.prompts), ref.params)])[0]


def reference_continuation(root: HitchRoot, model_id: str, prompt_ids: list[int], max_new_tokens: int) -> ReferencePromptResult:
    """The reference's greedy continuation of one prompt already rendered to ids (a request an engine answered,
    as the gateway renders it); computed on demand, beside the engine, so keep ``max_new_tokens`` small."""
    params = ReferenceParams(max_new_tokens=max_new_tokens, top_k=TOP_K)
    run, _ = _runs(root, model_id, [([{"prompt_token_ids": prompt_ids}], params)])[0]
    return run.results[0]


def _runs(root: HitchRoot, model_id: str, jobs: list[tuple[list[Prompt], ReferenceParams]]) -> list[tuple[ReferenceRunV1, bool]]:
    runtime = installed_runtime_named(root, REFERENCE_RUNTIME)
    if runtime is None:
        raise RuntimeError(f"the reference runtime {REFERENCE_RUNTIME} is not installed under {root.path}")
    return run_references(runtime, model_files(root, model_id), model_id, jobs, cache_dir=reference_cache_dir(root))


def prepare_references(root: HitchRoot, model_id: str) -> dict[str, dict[str, Any]]:
    """Compute (or find cached) every reference set ``model_id`` needs, in one runner process; per set: its
    prompts and budget, whether it was cached, and the seconds spent on it here and when it was computed.

    Serialised by a file mutex beside the cache: concurrent sessions' processes compute each set once.
    """
    from filelock import FileLock

    needed = [ref for ref in REFERENCE_SETS.values() if ref.behaviour is None or not_applicable(model_id, ref.behaviour) is None]
    cache = ensure_private_dir(reference_cache_dir(root))
    with FileLock(str(cache / "prepare.lock")):
        runs = _runs(root, model_id, [(list(ref.prompts), ref.params) for ref in needed])
    return {
        ref.name: {
            "prompts": len(ref.prompts),
            "max_new_tokens": ref.max_new_tokens,
            "cached": cached,
            "seconds": 0.0 if cached else round(run.seconds, 2),  # spent here: its share of the one runner process
            "computed_seconds": round(run.seconds, 2),
        }
        for ref, (run, cached) in zip(needed, runs, strict=True)
    }
