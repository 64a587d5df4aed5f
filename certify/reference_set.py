"""The correctness suite's fixed prompt sets and their reference runs, prepared before the engine starts.

The reference (Hugging Face transformers on the certified checkpoint, :mod:`fixtures.reference`) is
deterministic per ``model_id`` and prompt set and is cached under ``$HITCH_ROOT/cache/reference`` keyed by
both. It must be computed while no engine runs: SGLang's CPU scheduler spins one of two cores even when
idle, so a reference computed beside it takes about twice as long. :func:`prepare_references` is therefore
called by the certify session (:func:`certify.session.open_session`) after the model is imported and before
the engine is started, under a file lock so xdist workers compute it once; the suite then only reads the
cache (:func:`reference_run`).

Owns the prompt sets (:data:`PARITY_PROMPTS`, :data:`EVAL_SET`, the natural-stop question) and their
budgets; the checks and their tolerances live in ``certify/suites/test_correctness.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
from harness.paths import HitchRoot, ensure_private_dir

__all__ = [
    "EVAL_SET",
    "EVAL_SYSTEM",
    "EVAL_TOKENS",
    "PARITY_PROMPTS",
    "PARITY_TOKENS",
    "REFERENCE_SETS",
    "STOP_QUESTION",
    "STOP_TOKENS",
    "TOP_K",
    "ReferenceSet",
    "chat_messages",
    "eval_messages",
    "not_applicable",
    "prepare_references",
    "reference_continuation",
    "reference_run",
]

Message = dict[str, Any]

PARITY_TOKENS = 32
TOP_K = 5
EVAL_TOKENS = 12
STOP_TOKENS = 48

# user-only prompts: chat and Responses render them through the same template (no system folding)
PARITY_PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how photosynthesis works to a ten year old.",
    "List five tips for staying healthy and explain each one.",
    "Describe the water cycle in detail.",
    "What are the benefits of reading books every day?",
    "Write a poem about the ocean at night.",
    "How does a computer store information? Explain step by step.",
    "Give me a recipe for a simple vegetable soup.",
]
STOP_QUESTION = "What is the capital of France?"
EVAL_SYSTEM = "Answer with a single word only."
# (question, accepted answers): common knowledge a 135M instruct model can answer, each with one short answer
# (a number also in digits) that the question does not contain, so an answer that repeats the question never
# matches; scored by normalised exact match (certify.kit.correctness.answer_matches)
EVAL_SET: list[tuple[str, tuple[str, ...]]] = [
    ("What is the capital of France?", ("Paris",)),
    ("What is the capital of Japan?", ("Tokyo",)),
    ("What is the capital of Italy?", ("Rome",)),
    ("What is the capital of Germany?", ("Berlin",)),
    ("What is the capital of England?", ("London",)),
    ("What color is the sky on a clear day?", ("blue",)),
    ("What color is grass?", ("green",)),
    ("What color is snow?", ("white",)),
    ("What color is a ripe banana?", ("yellow",)),
    ("How many legs does a spider have?", ("eight", "8")),
    ("How many days are in a week?", ("seven", "7")),
    ("What is two plus two?", ("four", "4")),
    ("What is the opposite of hot?", ("cold",)),
    ("What is the opposite of day?", ("night",)),
    ("What is the largest planet in our solar system?", ("Jupiter",)),
    ("What is frozen water called?", ("ice",)),
    ("What do bees make?", ("honey",)),
    ("Which animal says meow?", ("cat", "cats")),
    ("Who wrote Romeo and Juliet?", ("Shakespeare",)),
    ("What language is spoken in Spain?", ("Spanish",)),
    ("At how many degrees Celsius does water boil?", ("100", "one hundred")),
    ("Which star is at the center of our solar system?", ("Sun",)),
]


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
    from harness.runtimes import get_runtime
    from harness.runtimes.install import installed_runtime
    from harness.store import model_files_dir

    runtime = installed_runtime(root, get_runtime(REFERENCE_RUNTIME))
    if runtime is None:
        raise RuntimeError(f"the reference runtime {REFERENCE_RUNTIME} is not installed under {root.path}")
    return run_references(runtime, model_files_dir(root, model_id), model_id, jobs, cache_dir=reference_cache_dir(root))


def prepare_references(root: HitchRoot, model_id: str) -> dict[str, dict[str, Any]]:
    """Compute (or find cached) every reference set ``model_id`` needs, in one runner process; per set: its
    prompts and budget, whether it was cached, and the seconds spent on it here and when it was computed.

    Serialised by a file lock beside the cache: concurrent sessions' processes compute each set once.
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
