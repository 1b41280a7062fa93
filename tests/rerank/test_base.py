"""The Reranker base: score, rank (a one-row RetrievalResult) and rerank of a first stage's result, on
deterministic rerankers that count shared words."""

from __future__ import annotations

import numpy as np
import pytest

from taskret.rerank import Reranker, RetrievalResult


class Overlap(Reranker):
    """A deterministic reranker: shared lower-cased words between query and document."""

    name = "overlap"

    def __init__(self):
        self.calls: list[list[tuple[str, str]]] = []

    def score_pairs(self, pairs):
        self.calls.append(list(pairs))
        return np.array([len(set(q.lower().split()) & set(d.lower().split())) for q, d in pairs], dtype=np.float32)


class TooFew(Reranker):
    """A broken backend: one score short."""

    def score_pairs(self, pairs):
        return np.zeros(max(len(pairs) - 1, 0))


def test_the_base_cannot_be_built_without_score_pairs():
    with pytest.raises(TypeError, match="score_pairs"):
        Reranker()


def test_score_is_one_float_per_document():
    scores = Overlap().score("heart attacks", ["coffee", "heart attacks risk", "heart"])
    assert scores.dtype == np.float32 and scores.tolist() == [0.0, 2.0, 1.0]


def test_rank_is_one_row_best_first_and_keeps_ties_in_order():
    ranked = Overlap().rank("heart attacks", ["coffee", "heart attacks risk", "heart", "tea"])
    assert isinstance(ranked, RetrievalResult)
    assert ranked.ids == [["1", "2", "0", "3"]]  # "coffee" and "tea" tie at 0: the given order stays
    assert ranked.scores.shape == (1, 4) and ranked.scores.dtype == np.float32
    assert ranked.scores[0].tolist() == [2.0, 1.0, 0.0, 0.0]
    named = Overlap().rank("heart", ["tea", "heart"], doc_ids=["t", "h"])
    assert named.ids == [["h", "t"]]
    with pytest.raises(ValueError, match="2 doc_ids for 1 documents"):
        Overlap().rank("q", ["a"], doc_ids=["x", "y"])
    empty = Overlap().rank("q", [])
    assert empty.ids == [[]] and empty.scores.shape == (1, 0)


def test_rerank_reorders_the_head_and_keeps_the_tail_below():
    texts = {"a": "coffee", "b": "tea", "c": "heart attacks", "d": "heart", "e": "heart attacks heart"}
    first = RetrievalResult([["a", "b", "c", "d", "e"], ["d", "c"]],
                            np.array([[5, 4, 3, 2, 1], [2, 1, np.nan, np.nan, np.nan]], dtype=np.float32))
    overlap = Overlap()
    result = overlap.rerank(["heart attacks", "heart attacks"], first, texts, top_k=3)
    assert result.ids[0] == ["c", "a", "b", "d", "e"]  # only the top 3 were reranked, the rest follow
    assert result.ids[1] == ["c", "d"]
    scores = result.scores[0]
    assert list(scores) == sorted(scores, reverse=True)  # trec_eval sorts by score: the same order
    assert len(overlap.calls) == 1 and len(overlap.calls[0]) == 5  # one batch of every query's pairs
    assert np.isnan(result.scores[1, 2:]).all()
    by_function = Overlap().rerank(["heart attacks", "heart attacks"], first, texts.__getitem__, top_k=3)
    assert by_function.ids == result.ids


def test_rerank_rejects_bad_arguments_and_bad_backends():
    first = RetrievalResult([["a", "b"]], np.array([[2, 1]], dtype=np.float32))
    texts = {"a": "x", "b": "y"}
    with pytest.raises(ValueError, match="top_k"):
        Overlap().rerank(["q"], first, texts, top_k=0)
    with pytest.raises(ValueError, match="2 queries for 1 result rows"):
        Overlap().rerank(["q", "r"], first, texts)
    with pytest.raises(ValueError, match="returned 1 scores for 2 pairs"):
        TooFew().rerank(["q"], first, texts)
