"""The paired bootstrap interval and McNemar's detectable difference (taskret.icl.compare), which every comparison
of EPR's successors reports beside its p-value."""

from __future__ import annotations

import pytest

from taskret.icl.compare import bootstrap_interval, min_detectable_difference


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
