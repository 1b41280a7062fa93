"""BM25Retriever (bm25s): ranking over inputs, outputs or both."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from taskret.retrieval import BM25Retriever
from taskret.retrieval.bm25 import numba_available
from taskret.retrieval.bm25_pisa import pisa_available

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


def test_bm25_reads_the_query_alone_unless_told_to_read_the_instruction(tmp_path):
    from taskret.retrieval import make_retriever
    from taskret.retrieval.index import load_index, save_index

    ids, texts = ["cat", "evidence"], ["the cat sat on the mat", "retrieve scientific evidence about dogs"]
    query = "Retrieve scientific evidence [SEP] where did the cat sit"
    bare = make_retriever("bm25").index_texts(ids, texts)
    instructed = make_retriever("bm25?read_instruction=1").index_texts(ids, texts)
    assert bare.retrieve([query], k=1).ids == [["cat"]]
    assert instructed.retrieve([query], k=1).ids == [["evidence"]]  # the instruction's words win the match
    assert make_retriever("bm25:output?read_instruction=1").field == "output"
    with pytest.raises(ValueError, match="read_instruction needs a 0 or 1"):
        make_retriever("bm25?read_instruction=yes")
    from taskret.data import Example

    save_index(tmp_path / "idx", instructed, [Example(i, t, "out") for i, t in zip(ids, texts)])
    assert load_index(tmp_path / "idx").retriever.retrieve([query], k=1).ids == [["evidence"]]  # saved as built


# --- backends: numpy or numba -----------------------------------------------------------------------

needs_numba = pytest.mark.skipif(not numba_available(), reason="numba is not installed")


@needs_numba
def test_numba_ranks_by_the_same_scores_as_numpy(pool_examples):
    on_numpy = BM25Retriever(backend="numpy").index(pool_examples)
    on_numba = BM25Retriever(backend="numba").index(pool_examples)
    queries = QUERIES + ["miles davis tune", "zzz unknown words only", ""]
    expected, got = on_numpy.retrieve(queries, k=4), on_numba.retrieve(queries, k=4)
    assert on_numba._bm25.backend == "numba" and on_numpy._bm25.backend == "numpy"
    np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-6)
    assert [row[0] for row in got.ids[:3]] == [row[0] for row in expected.ids[:3]]


@needs_numba
def test_auto_chooses_by_the_index_size_so_an_index_always_ranks_alike(pool_examples, monkeypatch):
    import taskret.retrieval.bm25 as bm25

    small = BM25Retriever().index(pool_examples)
    small.retrieve(QUERIES, k=2)
    assert not small.uses_numba() and small._bm25.backend == "numpy"
    monkeypatch.setattr(bm25, "NUMBA_FROM", len(pool_examples))
    large = BM25Retriever().index(pool_examples)
    large.warm_up()  # a service's start: the first query, compiled now
    assert large.uses_numba() and large._bm25.backend == "numba" and large.backend == "auto"
    assert large.retrieve(QUERIES[:1], k=1).ids == [["weather"]] and large._bm25.backend == "numba"
    assert BM25Retriever(backend="numpy").index(pool_examples).retrieve(QUERIES[:1], k=1).ids == [["weather"]]


def test_bm25_rejects_an_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'jax'"):
        BM25Retriever(backend="jax")


@pytest.mark.parametrize("backend", ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_available(), reason="numba not installed")), pytest.param("pisa", marks=pytest.mark.skipif(
        not pisa_available(), reason="pyterrier-pisa not installed"))])
def test_equal_scores_rank_in_corpus_order_even_past_the_search_margin(backend):
    """A document repeated word for word scores as its original: the original (the lower row) ranks first, and a tie
    of more documents than k plus the margin (here 40 copies) is still cut in corpus order, as shards merge it."""
    import random

    from taskret.retrieval.bm25 import TIE_MARGIN

    rng = random.Random(0)
    words = [f"w{i}" for i in range(30)]
    originals = [" ".join(rng.choice(words) for _ in range(6)) for _ in range(100)]
    texts = originals + [originals[i % 100] for i in range(4000)]  # 40 copies of each, after every original
    ids = [f"d{i}" for i in range(len(texts))]
    retriever = BM25Retriever(backend=backend).index_texts(ids, texts)
    found = retriever.retrieve([originals[7], "w3 w4"], k=10)
    assert 40 > 10 + TIE_MARGIN
    assert found.ids[0] == [f"d{7 + 100 * n}" for n in range(10)]  # the original, then its copies in order
    for ids_q, scores_q in zip(found.ids, found.scores):
        rows = [int(i[1:]) for i in ids_q]
        assert all(a > b or (a == b and r < s) for a, b, r, s in zip(scores_q, scores_q[1:], rows, rows[1:]))


# A fresh process (the thresholds are process-wide): the ceiling glibc adapts to lowered to one block, so that an
# index of 2,000 documents counts as past it; its search sets the thresholds for its score array.
SCORE_ARRAY_PROBE = """
from taskret import allocator
from taskret.retrieval import BM25Retriever
allocator.GLIBC_DYNAMIC_MMAP_MAX = 4096
retriever = BM25Retriever(backend="numpy").index_texts([str(n) for n in range(2000)],
                                                      ["document %d about birds" % n for n in range(2000)])
print(allocator._kept_blocks)
retriever.retrieve(["birds"], k=3)
print(allocator._kept_blocks)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's thresholds")
def test_a_search_keeps_its_score_arrays_pages_past_glibcs_own_ceiling():
    out = subprocess.run([sys.executable, "-c", SCORE_ARRAY_PROBE], capture_output=True, text=True, check=True,
                         env={k: v for k, v in os.environ.items() if k != "TASKRET_GLIBC_MALLOC"}).stdout.split()
    assert out == ["0", str(2000 * 4)]  # float32 scores, one per document
