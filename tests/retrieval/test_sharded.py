"""Sharded search (taskret.retrieval.sharded): BM25 shards scored with the whole corpus's statistics merge into the
single index's top 10; shards with their own statistics do not; a shard that fails is named, or its absence marked
in a partial answer, never dropped silently."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from taskret.retrieval import Retriever
from taskret.retrieval.base import RetrievalResult
from taskret.retrieval.bm25 import BM25Retriever
from taskret.retrieval.bm25_segments import CorpusStatistics, corpus_statistics
from taskret.retrieval.sharded import ShardedSearch, ShardFailed, index_bm25_shards, merge_top_k

from .builders import sharded_corpus

SPLITS = (0, 700, 1900, 3000)  # three shards of unequal sizes


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    return sharded_corpus(SPLITS, seed=1)


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory):
    ids, texts = corpus
    root = tmp_path_factory.mktemp("sharded")
    shards = [(ids[a:b], lambda a=a, b=b: iter(texts[a:b])) for a, b in zip(SPLITS, SPLITS[1:])]
    folders = index_bm25_shards(shards, root / "index", root / "work")
    single = BM25Retriever().index_stream(ids, lambda: iter(texts))
    rng = random.Random(2)
    queries = [" ".join(rng.sample(texts[rng.randrange(len(texts))].split(), 2)) for _ in range(200)]
    return folders, single, queries, root


def _search(folders, **options) -> ShardedSearch:
    loaded = {folder.name: Retriever.load(folder) for folder in folders}
    return ShardedSearch({name: r.retrieve for name, r in loaded.items()}, **options)


def test_shards_with_the_corpus_statistics_merge_into_the_single_indexs_top_10(built, corpus):
    folders, single, queries, root = built
    statistics = CorpusStatistics.load(root / "index" / "statistics.json")
    assert statistics.n_docs == len(corpus[0])
    meta = json.loads((folders[1] / "meta.json").read_text())
    assert meta["corpus_statistics"] == {"n_docs": 3000, "total_length": statistics.total_length}
    merged = _search(folders).retrieve(queries, k=10)
    expected = single.retrieve(queries, k=11)
    assert not merged.partial
    np.testing.assert_array_equal(merged.result.scores, expected.scores[:, :10])
    # the same document at every rank whose score no other of the top 11 shares (equal scores may come in any order)
    checked = 0
    for q in range(len(queries)):
        scores = expected.scores[q].tolist()
        for rank in range(10):
            if scores.count(scores[rank]) == 1:
                assert merged.result.ids[q][rank] == expected.ids[q][rank], (q, rank)
                checked += 1
    assert checked > 500


def test_shards_scored_with_their_own_statistics_rank_otherwise(built, corpus, tmp_path):
    ids, texts = corpus
    _, single, queries, _ = built
    own = [BM25Retriever().index_stream(ids[a:b], lambda a=a, b=b: iter(texts[a:b])) for a, b in zip(SPLITS, SPLITS[1:])]
    merged = ShardedSearch({f"s{n}": r.retrieve for n, r in enumerate(own)}).retrieve(queries, k=10)
    expected = single.retrieve(queries, k=10)
    differing = sum(merged.result.ids[q] != expected.ids[q] for q in range(len(queries)))
    assert differing > 20  # what the shared statistics are for


def test_statistics_add_up_to_the_corpus_and_refuse_another_corpus(corpus, tmp_path):
    ids, texts = corpus
    parts = [corpus_statistics(iter(texts[a:b]), tmp_path / f"w{a}") for a, b in zip(SPLITS, SPLITS[1:])]
    summed = parts[0].merge(parts[1]).merge(parts[2])
    whole = corpus_statistics(iter(texts), tmp_path / "whole")
    assert summed == whole
    with pytest.raises(ValueError, match="statistics of another corpus"):
        BM25Retriever().index_shard(["x"], lambda: iter(["zebra unicorn"]), parts[0], tmp_path / "other")


def test_a_failing_shard_is_named_or_marked_missing(built, corpus):
    folders, _, queries, _ = built
    search = _search(folders)

    def dead(queries, k):
        raise ConnectionError("the shard's worker died")

    shards = {**search.shards, "shard-1": dead}
    with pytest.raises(ShardFailed, match="shard 'shard-1' failed: ConnectionError: the shard's worker died"):
        ShardedSearch(shards).retrieve(queries[:3], k=10)
    partial = ShardedSearch(shards, allow_partial=True).retrieve(queries[:3], k=10)
    assert partial.partial and partial.missing == ["shard-1"]
    assert not {doc for row in partial.result.ids for doc in row} & set(corpus[0][SPLITS[1]:SPLITS[2]])
    with pytest.raises(ShardFailed, match="no shard answered"):
        ShardedSearch({"a": dead}, allow_partial=True).retrieve(["x"], k=3)


def test_merge_keeps_the_best_k_and_skips_padding():
    first = RetrievalResult([["a", "b"]], np.array([[3.0, 1.0, np.nan]], dtype=np.float32))
    second = RetrievalResult([["c", "d", "e"]], np.array([[2.0, 1.0, 0.5]], dtype=np.float32))
    merged = merge_top_k([first, second], 4)
    assert merged.ids == [["a", "c", "b", "d"]]  # the tie at 1.0: the first shard's first
    np.testing.assert_array_equal(merged.scores, [[3.0, 2.0, 1.0, 1.0]])
    short = merge_top_k([first], 3)
    assert short.ids == [["a", "b"]] and np.isnan(short.scores[0, 2])
