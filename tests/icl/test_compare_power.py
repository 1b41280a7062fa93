"""The paired bootstrap interval and McNemar's detectable difference (taskret.icl.compare), which every comparison
of EPR's successors reports beside its p-value, and their graded twins (a sentence chrF per input)."""

from __future__ import annotations

import pytest

from taskret.icl.compare import (
    bootstrap_interval,
    holm_adjusted,
    min_detectable_difference,
    min_detectable_mean_difference,
    paired_graded_comparison,
)


def test_the_bootstrap_interval_holds_the_observed_difference_and_narrows_with_n():
    small_a = {str(i): i % 3 == 0 for i in range(60)}
    small_b = {str(i): i % 4 == 0 for i in range(60)}
    large_a = {str(i): i % 3 == 0 for i in range(600)}
    large_b = {str(i): i % 4 == 0 for i in range(600)}
    observed = 100 * (sum(small_a.values()) - sum(small_b.values())) / 60
    low, high = bootstrap_interval(small_a, small_b, n_resamples=2000)
    assert low < observed < high
    low_large, high_large = bootstrap_interval(large_a, large_b, n_resamples=2000)
    assert high_large - low_large < (high - low) / 2
    assert bootstrap_interval(small_a, small_a, n_resamples=200) == (0.0, 0.0)
    with pytest.raises(ValueError, match="same test inputs"):
        bootstrap_interval(small_a, large_b)


def test_the_detectable_difference_shrinks_with_n_and_grows_with_discordance():
    # The arithmetic: at N=300 with ~46 discordant inputs McNemar needs ~5 EM even at 50% power.
    at_300 = min_detectable_difference(300, 46)
    at_859 = min_detectable_difference(859, 132)
    assert 5 < at_300 < 8 and 3 < at_859 < at_300
    assert min_detectable_difference(859, 200) > at_859
    assert min_detectable_difference(300, 46, power=0.5) < at_300
    assert min_detectable_difference(300, 0) is None


def test_a_graded_comparison_pairs_scores_in_points_and_its_detectable_difference_shrinks_with_n():
    base = {str(i): 30.0 + i % 9 for i in range(200)}
    better = {i: v + (4.0 if int(i) % 5 else -6.0) for i, v in base.items()}  # +2.0 on average
    paired = paired_graded_comparison(better, base)
    assert (paired["higher_a"], paired["higher_b"]) == (160, 40) and paired["p"] < 0.001
    low, high = paired["diff_ci95"]
    assert 1.0 < low < 2.0 < high < 3.0  # points, as the scores are: not multiplied by 100
    detectable = paired["min_detectable_diff"]
    assert 0 < detectable < 2.0
    assert min_detectable_mean_difference([d for d in (4.0, -6.0, 4.0, 4.0, 4.0) * 10]) > detectable
    assert min_detectable_mean_difference([1.0, 1.0]) is None and min_detectable_mean_difference([1.0]) is None
    assert bootstrap_interval(better, base, n_resamples=500, scale=1.0)[0] > 1.0
    with pytest.raises(ValueError, match="same examples"):
        paired_graded_comparison(better, {"0": 1.0})


def test_holm_multiplies_the_ith_smallest_p_by_the_tests_left_and_never_lets_it_fall():
    raw = {"a": 0.0, "b": 0.0012, "c": 0.0001, "d": 0.0314, "e": 0.7122}
    adjusted = holm_adjusted(raw)
    assert adjusted == pytest.approx({"a": 0.0, "c": 0.0004, "b": 0.0036, "d": 0.0628, "e": 0.7122})
    assert holm_adjusted({"x": 0.04, "y": 0.03}) == pytest.approx({"y": 0.06, "x": 0.06})  # 0.04 x 1 < 0.06: kept at 0.06
    assert holm_adjusted({"x": 0.6, "y": 0.5}) == {"y": 1.0, "x": 1.0}  # capped at 1
    assert holm_adjusted({}) == {}
    statsmodels = pytest.importorskip("statsmodels.stats.multitest")
    reference = statsmodels.multipletests(list(raw.values()), method="holm")[1]
    assert [adjusted[k] for k in raw] == pytest.approx(list(reference))
