"""harness.stats: percentiles and the bootstrap intervals of added figures (hermetic, seeded)."""

from __future__ import annotations

import random

import pytest

from harness.stats import added_intervals, min_samples, percentile, ratio_interval, wilson_interval

QS = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def _sample(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.lognormvariate(0, 0.5) for _ in range(n)]


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([5.0], 0.99) == 5.0


def test_min_samples_p99_needs_100_per_arm() -> None:
    assert (min_samples(0.5), min_samples(0.95), min_samples(0.99)) == (2, 20, 100)
    with pytest.raises(ValueError):
        min_samples(1.0)


def test_a_known_shift_is_found_and_its_interval_excludes_zero() -> None:
    base = _sample(400, 1)
    shifted = [x + 0.25 for x in _sample(400, 2)]
    out = added_intervals(base, shifted, QS, resamples=400)
    p50 = out["p50"]
    assert p50["low"] <= p50["estimate"] <= p50["high"]
    assert p50["low"] > 0 and not p50["noise"]
    assert all(e["n"] == 400 and e["reliable"] for e in out.values())


def test_the_same_distribution_gives_an_interval_holding_zero() -> None:
    """Two draws from one distribution: whatever the sign of the estimate, the difference is noise."""
    out = added_intervals(_sample(300, 3), _sample(300, 4), QS, resamples=400)
    for entry in out.values():
        assert entry["low"] <= 0 <= entry["high"] and entry["noise"]


def test_intervals_are_deterministic_and_scaled() -> None:
    a, b = _sample(120, 5), _sample(120, 6)
    one = added_intervals(a, b, QS, resamples=300)
    assert one == added_intervals(a, b, QS, resamples=300)
    ms = added_intervals(a, b, QS, resamples=300, scale=1000.0)
    assert ms["p50"]["estimate"] == pytest.approx(one["p50"]["estimate"] * 1000)
    assert ms["p50"]["high"] == pytest.approx(one["p50"]["high"] * 1000)


def test_a_p99_from_fewer_than_100_samples_is_unreliable() -> None:
    out = added_intervals(_sample(60, 7), _sample(99, 8), QS, resamples=200)
    assert out["p99"]["n"] == 60 and not out["p99"]["reliable"]
    assert out["p95"]["reliable"] and out["p50"]["reliable"]


def test_no_samples_give_no_figure() -> None:
    out = added_intervals([], [1.0], QS)
    assert out["p50"] == {"estimate": None, "low": None, "high": None, "n": 0, "reliable": False, "noise": True}


def test_wilson_interval_matches_the_textbook_values_and_stays_in_bounds() -> None:
    # 7 of 10: Wilson 95 % = [0.3968, 0.8922] (Newcombe 1998, table I)
    mid = wilson_interval(7, 10)
    assert mid["estimate"] == pytest.approx(0.7) and mid["n"] == 10 and mid["successes"] == 7
    assert mid["low"] == pytest.approx(0.3968, abs=1e-4) and mid["high"] == pytest.approx(0.8922, abs=1e-4)
    # 0 and n successes: the interval still has width and never leaves [0, 1]
    none, all_ = wilson_interval(0, 5), wilson_interval(5, 5)
    assert none["low"] == 0.0 and 0 < none["high"] < 0.5
    assert all_["high"] == 1.0 and 0.5 < all_["low"] < 1.0
    assert wilson_interval(0, 0) == {"estimate": None, "low": None, "high": None, "n": 0, "successes": 0}
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_a_ratio_of_paired_totals_has_an_interval_that_holds_it() -> None:
    pairs = [(2.0 + 0.1 * (i % 5), 1.0) for i in range(40)]
    ci = ratio_interval(pairs)
    assert ci["n"] == 40 and ci["estimate"] == pytest.approx(2.2)
    assert 2.0 < ci["low"] < ci["estimate"] < ci["high"] < 2.4
    assert ratio_interval([(1.0, 0.0)])["estimate"] is None  # nothing to divide by
