"""BM25Retriever (bm25s): ranking over inputs, outputs or both."""

from __future__ import annotations

import numpy as np
import pytest

from taskret.retrieval import BM25Retriever

from .builders import QUERIES

# --- BM25 -----------------------------------------------------------------------------------------


def test_bm25_finds_the_obvious_match_first(pool_examples):
    result = BM25Retriever().index(pool_examples).retrieve(QUERIES, k=3)
    assert [row[0] for row in result.ids] == ["weather", "music", "timer"]
    assert result.scores.shape == (3, 3)
    assert np.all(np.diff(result.scores, axis=1) <= 0)  # best first
    assert result.scores[0, 0] > 0


def test_bm25_over_outputs_and_both(pool_examples):
    # "CREATE_REMINDER" appears only in an output; "groceries" in both the input and the output.
    query = ["create_reminder"]
    assert BM25Retriever(field="output").index(pool_examples).retrieve(query, k=1).ids[0] == ["reminder"]
    assert BM25Retriever(field="both").index(pool_examples).retrieve(query, k=1).ids[0] == ["reminder"]
    assert BM25Retriever(field="input").index(pool_examples).retrieve(query, k=1).scores[0, 0] == 0
    # Words of an input are found through "both" but not through "output".
    query = ["miles davis tune"]
    assert BM25Retriever(field="both").index(pool_examples).retrieve(query, k=1).ids[0] == ["music"]
    output_only = BM25Retriever(field="output").index(pool_examples).retrieve(query, k=2)
    assert output_only.ids[0][0] == "music" and output_only.scores[0, 0] > 0  # "davis" is in its output
    assert output_only.scores[0, 1] == 0


def test_bm25_rejects_unknown_field():
    with pytest.raises(ValueError, match="unknown field 'question'"):
        BM25Retriever(field="question")
