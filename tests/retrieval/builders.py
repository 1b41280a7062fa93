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


def sharded_corpus(splits: tuple[int, ...], seed: int, n_words: int = 2000) -> tuple[list[str], list[str]]:
    """Ids and texts of a corpus cut at ``splits`` into shards of different vocabularies: a term common in one shard
    is rare in the others, so a shard's own BM25 statistics would weigh it otherwise than the corpus's."""
    import random

    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words = list(dict.fromkeys("".join(rng.sample(syllables, rng.randint(1, 3))) for _ in range(n_words)))
    texts: list[str] = []
    for shard, (start, stop) in enumerate(zip(splits, splits[1:])):
        local = words[shard * 30:(shard + 1) * 30]
        texts += [" ".join(rng.choice(local if rng.random() < 0.4 else words) for _ in range(rng.randint(3, 25)))
                  for _ in range(stop - start)]
    return [f"d{i}" for i in range(len(texts))], texts
