"""The map that puts a reward model's logits on the scoring LM's scale (taskret.epr.reward_labels.lm_scale_map)."""

from __future__ import annotations

import numpy as np
import pytest

from taskret.epr.reward_labels import lm_scale_map


def test_one_slope_for_every_input_and_one_intercept_each_are_recovered_from_noisy_pairs():
    """Inputs whose candidates the reward model rates higher have lower log-probabilities here (their outputs are
    longer, say): a line through all pairs pooled would slope down; within each input the LM agrees with it."""
    rng = np.random.default_rng(0)
    pairs, offsets = {}, {}
    for i in range(40):
        rewards = rng.normal(0.5 * i, 1.0, size=30)
        offsets[f"q{i}"] = -2.0 * 0.5 * i + float(rng.normal(0, 0.5))
        pairs[f"q{i}"] = list(zip(rewards, 0.4 * rewards + offsets[f"q{i}"] + rng.normal(0, 0.05, size=30)))
    pooled = np.polyfit([r for v in pairs.values() for r, _ in v], [lm for v in pairs.values() for _, lm in v], 1)[0]
    assert pooled < 0
    slope, intercepts = lm_scale_map(pairs)
    assert slope == pytest.approx(0.4, abs=0.01)
    assert max(abs(intercepts[k] - offsets[k]) for k in offsets) < 0.1


def test_a_reward_model_that_ranks_against_the_lm_or_rates_all_alike_is_refused():
    against = {"q": [(1.0, -2.0), (2.0, -3.0), (3.0, -4.0)]}
    with pytest.raises(ValueError, match="against the LM"):
        lm_scale_map(against)
    with pytest.raises(ValueError, match="alike"):
        lm_scale_map({"q": [(1.0, -2.0), (1.0, -3.0)]})
