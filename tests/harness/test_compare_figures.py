"""harness.compare.figures and harness.compare.decide: equivalence verdicts with Holm (hermetic, seeded bootstrap)."""

from __future__ import annotations

import random

from harness.compare.decide import MIN_SAMPLES, Question, decide, overall
from harness.compare.figures import decide_figures, proportion_figure, sample_figure


def _noise(centre: float, n: int, seed: int, spread: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [centre * (1 + rng.gauss(0, spread)) for _ in range(n)]


def test_a_shift_far_beyond_the_margin_differs_and_the_same_samples_are_the_same() -> None:
    base = [10.0 + (i % 5) * 0.1 for i in range(20)]
    shifted = [v + 5.0 for v in base]
    [differs] = decide_figures([sample_figure("e2e_ms", "ms", "latency", base, shifted)])
    assert differs.verdict == "differs" and differs.difference["low"] > 4.0
    assert differs.decision is not None and abs(differs.decision.margin - 0.51) < 1e-9  # max(0.5 ms, 5 % of 10.2 ms)
    assert differs.a["n"] == differs.b["n"] == 20 and differs.a["low"] <= differs.a["estimate"] <= differs.a["high"]
    [same] = decide_figures([sample_figure("e2e_ms", "ms", "latency", base, list(base))])
    assert same.verdict == "same"


def test_one_sample_a_side_is_inconclusive_and_says_how_many_would_decide() -> None:
    [one] = decide_figures([sample_figure("e2e_ms", "ms", "latency", [50.0], [51.0])])
    assert one.verdict == "inconclusive" and one.decision is not None
    assert one.decision.samples_needed is not None and one.decision.samples_needed >= MIN_SAMPLES
    assert overall([one.decision]) == "inconclusive"


def test_a_ten_percent_slowdown_differs_and_noise_of_the_same_engine_is_the_same() -> None:
    a, b, slow = _noise(100.0, 60, 1), _noise(100.0, 60, 2), _noise(110.0, 60, 3)
    figures = decide_figures([sample_figure("e2e_ms", "ms", "latency", a, b)])
    assert [f.verdict for f in figures] == ["same"]
    assert [f.verdict for f in decide_figures([sample_figure("e2e_ms", "ms", "latency", a, slow)])] == ["differs"]


def test_an_interval_wider_than_the_margin_is_inconclusive_with_the_samples_needed() -> None:
    a, b = _noise(100.0, 8, 4, spread=0.2), _noise(100.0, 8, 5, spread=0.2)
    [wide] = decide_figures([sample_figure("e2e_ms", "ms", "latency", a, b)])
    assert wide.verdict == "inconclusive" and wide.decision is not None
    assert wide.decision.samples_needed is not None and wide.decision.samples_needed > 8


def test_holm_keeps_a_borderline_figure_among_many_from_being_called_different() -> None:
    # alone, p = 0.02 rejects at 5 %; among 20 figures Holm needs p <= 0.0025 for the smallest
    borderline = Question("x", "latency", 0.5 + 2.054 * 0.1, 0.1, 30, 1.0)  # |d| - m = 2.054 se: p = 0.02
    assert decide([borderline])[0].verdict == "differs"
    others = [Question(f"y{i}", "latency", 0.0, 0.01, 30, 1.0) for i in range(19)]
    decided = decide([borderline, *others])
    assert decided[0].verdict == "inconclusive" and all(d.verdict == "same" for d in decided[1:])
    assert overall(decided) == "inconclusive"
    assert overall(decided[1:]) == "reproduced" and overall(decided[1:], other_differences=True) == "differs"


def test_an_unreliable_figure_is_decided_but_not_material() -> None:
    q = Question("p99", "latency", 0.0, 5.0, 30, 10.0, material=False)
    [d] = decide([q])
    assert d.verdict == "inconclusive" and not d.material and overall([d]) == "reproduced"


def test_shares_are_decided_on_their_difference() -> None:
    [differs] = decide_figures([proportion_figure("solved", (19, 20), (1, 20))])
    assert differs.verdict == "differs" and differs.method == "agresti-caffo"
    [same] = decide_figures([proportion_figure("solved", (200, 200), (200, 200))])
    assert same.verdict == "same"
    [empty] = decide_figures([proportion_figure("solved", (0, 0), (3, 4))])
    assert empty.verdict == "inconclusive" and empty.a["estimate"] is None
