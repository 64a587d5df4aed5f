"""harness.compare.figures: the "differs beyond noise" verdicts (hermetic, seeded bootstrap)."""

from __future__ import annotations

from harness.compare.figures import MIN_VERDICT_SAMPLES, proportion_figure, sample_figure


def test_a_shift_far_beyond_the_spread_differs_and_the_same_samples_do_not() -> None:
    base = [10.0 + (i % 5) * 0.1 for i in range(20)]
    shifted = [v + 5.0 for v in base]
    differs = sample_figure("e2e_ms", "ms", base, shifted)
    assert differs.verdict == "differs" and differs.difference is not None and differs.difference["low"] > 4.0
    assert differs.a["n"] == differs.b["n"] == 20 and differs.a["low"] <= differs.a["estimate"] <= differs.a["high"]
    assert sample_figure("e2e_ms", "ms", base, list(base)).verdict == "same"


def test_too_few_samples_are_shown_but_never_called_a_difference() -> None:
    few = sample_figure("e2e_ms", "ms", [1.0] * (MIN_VERDICT_SAMPLES - 1), [100.0] * 20)
    assert few.verdict == "too_few" and few.difference is not None and few.difference["estimate"] == 99.0


def test_shares_differ_only_when_their_wilson_intervals_do_not_overlap() -> None:
    assert proportion_figure("solved", (19, 20), (1, 20)).verdict == "differs"
    assert proportion_figure("solved", (12, 20), (9, 20)).verdict == "same"
    empty = proportion_figure("solved", (0, 0), (3, 4))
    assert empty.verdict == "too_few" and empty.a["estimate"] is None and empty.method == "wilson"
