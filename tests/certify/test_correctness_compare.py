"""The correctness suite's comparison (hermetic): token names as SGLang gives them, the greedy-parity walk
with its tolerances, and exact-match scoring."""

from __future__ import annotations

from pathlib import Path

from certify.kit.correctness import EngineToken, TokenKeys, answer_matches, answer_words, compare_greedy
from fixtures.reference import ReferencePromptResult, TokenLogprob


def _ref(tokens: list[int], tops: list[list[tuple[int, float]]]) -> ReferencePromptResult:
    return ReferencePromptResult(
        prompt_token_ids=[1],
        token_ids=tokens,
        text="",
        finish_reason="length",
        top_logprobs=[[TokenLogprob(id=i, logprob=lp) for i, lp in top] for top in tops],
    )


def _engine(*rows: tuple[int, float, dict[int, float]]) -> list[EngineToken]:
    return [EngineToken(tid, lp, top) for tid, lp, top in rows]


REF = _ref([5, 6, 7], [[(5, -0.1), (9, -2.5)], [(6, -0.6), (8, -0.8)], [(7, -0.2), (3, -3.0)]])


def test_identical_continuations_compare_every_position() -> None:
    engine = _engine((5, -0.12, {5: -0.12, 9: -2.4}), (6, -0.62, {6: -0.62, 8: -0.79}), (7, -0.21, {7: -0.21, 3: -3.1}))
    result = compare_greedy(engine, REF, int, match_tol=0.25, tie_tol=0.5)
    assert (result.compared, result.diverged_at, result.problems) == (3, None, [])
    assert round(result.max_match_gap, 4) == 0.02


def test_a_near_tie_divergence_ends_the_walk_and_passes() -> None:
    engine = _engine((5, -0.1, {5: -0.1, 9: -2.5}), (8, -0.7, {8: -0.7, 6: -0.75}), (1, -0.1, {1: -0.1}))
    result = compare_greedy(engine, REF, int, match_tol=0.25, tie_tol=0.5)
    assert (result.compared, result.diverged_at, result.problems) == (1, 1, [])
    assert result.tie_gap is not None and round(result.tie_gap, 4) == 0.2


def test_a_divergence_outside_the_top_k_or_no_tie_fails() -> None:
    outside = _engine((5, -0.1, {5: -0.1}), (4, -0.1, {4: -0.1, 2: -0.2}))
    problems = compare_greedy(outside, REF, int, match_tol=0.25, tie_tol=0.5).problems
    assert len(problems) == 2 and "not in the engine's top-2" in problems[0] and "not in the reference's top-2" in problems[1]
    sure = _engine((9, -0.05, {9: -0.05, 5: -3.0}))
    assert "no near tie" in compare_greedy(sure, REF, int, match_tol=0.25, tie_tol=0.5).problems[0]


def test_a_logprob_gap_beyond_tolerance_or_a_length_difference_fails() -> None:
    off = _engine((5, -0.9, {5: -0.9, 9: -1.0}), (6, -0.6, {6: -0.6}), (7, -0.2, {7: -0.2}))
    result = compare_greedy(off, REF, int, match_tol=0.25, tie_tol=0.5)
    assert result.compared == 3 and result.problems == ["position 0: token 5 logprob -0.9000 vs -0.1000"]
    short = compare_greedy(off[:2], REF, int, match_tol=1.0, tie_tol=0.5).problems
    assert short == ["the engine generated 2 tokens, the reference 3, with no divergence"]


def test_token_names_follow_sglangs_byte_and_display_forms(tiny_model: Path) -> None:
    from tokenizers import Tokenizer

    keys = TokenKeys(tiny_model)
    tok = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    ids = tok.encode("Hello world, the café!", add_special_tokens=False).ids
    assert b"".join(bytes(keys.raw_bytes(i)) for i in ids).decode() == "Hello world, the café!"
    for i in ids:  # a whole character shows as itself, a fragment of one as U+FFFD (SGLang's display text)
        raw = bytes(keys.raw_bytes(i))
        try:
            assert keys.display(i) == raw.decode()
        except UnicodeDecodeError:
            assert keys.display(i) == "\ufffd"
    assert any(keys.display(i) == "\ufffd" for i in ids)  # "é" is split into byte tokens by this vocabulary
    special = tok.token_to_id("<|im_end|>")
    assert special is not None
    assert bytes(keys.raw_bytes(special)) == keys.display(special).encode()


def test_answer_match_is_a_normalised_whole_word_match_on_the_first_line() -> None:
    assert answer_matches(" Paris.", ("Paris",)) and answer_matches("BLUE!", ("blue",)) and answer_matches("Au", ("au",))
    assert answer_matches("The capital of France is Paris.", ("Paris",))
    assert answer_matches("A spider has 8 legs.", ("eight", "8"))
    assert answer_matches("It is the Pacific Ocean", ("Pacific Ocean",))
    assert answer_matches("\uff30\uff21\uff32\uff29\uff33", ("Paris",))  # NFKC: full-width letters are letters
    assert not answer_matches("", ("Paris",)) and not answer_matches("Parisian food", ("Paris",))
    assert not answer_matches("Par is", ("Paris",)) and not answer_matches("Pacific", ("Pacific Ocean",))
    assert not answer_matches("I do not know.\nParis", ("Paris",))  # only the first non-empty line counts
    assert answer_matches("\n\nParis\nLondon", ("Paris",))
    assert not answer_matches("Paris", ("",))


def test_the_question_set_is_fixed_and_unambiguous() -> None:
    from certify.reference_set import EVAL_SET

    assert len(EVAL_SET) >= 20
    assert len({q for q, _ in EVAL_SET}) == len(EVAL_SET)
    for question, accepted in EVAL_SET:
        assert accepted and all(answer_words(a) for a in accepted), question
        # an accepted answer that the question itself contains would match an answer that merely repeats it
        assert not any(answer_matches(question, (a,)) for a in accepted), question
