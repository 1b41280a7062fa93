"""Shared inputs and checks of the retriever tests."""

from __future__ import annotations

import numpy as np

from taskret.data import Example

QUERIES = ["will it rain in paris tomorrow, what is the forecast", "play jazz by miles davis",
           "start a twenty minute timer"]


def big_pool(n: int = 40) -> list[Example]:
    return [Example(f"e{i}", f"example number {i} about topic {i % 7}", f"OUT_{i}") for i in range(n)]


def assert_same_results(a, b):
    assert a.ids == b.ids
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-6)
