"""``correctness.determinism`` certifies what the lock says: greedy locks are held to identical tokens, a lock that
samples is ``not_applicable`` with the reason (:func:`certify.kit.correctness.determinism_not_applicable`)."""

from __future__ import annotations

from certify.kit.correctness import determinism_not_applicable
from harness.lock import GENERATION_PROFILES
from tests.gateway.support import make_lock


def test_a_greedy_lock_is_held_to_identical_tokens() -> None:
    assert determinism_not_applicable(make_lock().generation) is None
    assert determinism_not_applicable(GENERATION_PROFILES["greedy"].sampling) is None


def test_a_sampled_lock_is_not_applicable_and_says_why() -> None:
    reason = determinism_not_applicable(GENERATION_PROFILES["balanced"].sampling)
    assert reason is not None
    assert "temperature 0.7" in reason and "greedy locks only" in reason
