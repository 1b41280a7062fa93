"""Fixtures of the TART training tests: the three tiny hand-made tasks and their training rows."""

from __future__ import annotations

import pytest

from taskret.tart.training_data import build_training_examples

from .test_training_data import make_tasks


@pytest.fixture(scope="module")
def tasks():
    return make_tasks()


@pytest.fixture(scope="module")
def rows(tasks):
    """Two hard, one random and two instruction-unfollowing negatives per query (fewer where a corpus is small)."""
    return build_training_examples(tasks, n_hard=2, n_random=1, n_unfollowing=2, seed=0)
