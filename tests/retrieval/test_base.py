"""The retriever interface every method shares: retrieve (exclude-self, k beyond the pool), RetrievalResult,
save and load and their failure modes, and make_retriever specs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from taskret.ids import IDS_FILE, IDS_OFFSETS_FILE, IdList
from taskret.retrieval import (
    BM25Retriever,
    DenseRetriever,
    RandomRetriever,
    RetrievalResult,
    Retriever,
    SBERTRetriever,
    make_retriever,
)

from .builders import QUERIES, assert_same_results


@pytest.mark.parametrize("make", [lambda: BM25Retriever(), lambda: RandomRetriever(seed=3)],
                         ids=["bm25", "random"])
def test_exclude_self_removes_own_id_and_keeps_k(pool_examples, make):
    retriever = make().index(pool_examples)
    queries = [e.input for e in pool_examples]
    plain = retriever.retrieve(queries, k=3)
    excluded = retriever.retrieve(queries, k=3, exclude=[e.id for e in pool_examples])
    for example, row in zip(pool_examples, excluded.ids):
        assert example.id not in row
        assert len(row) == 3 and len(set(row)) == 3
    assert not np.isnan(excluded.scores).any()
    if isinstance(retriever, BM25Retriever):
        assert [row[0] for row in plain.ids] == [e.id for e in pool_examples]  # each finds itself
        assert [row[:2] for row in excluded.ids] == [row[1:3] for row in plain.ids]


def test_exclude_none_entries_exclude_nothing(pool_examples):
    retriever = BM25Retriever().index(pool_examples)
    result = retriever.retrieve([pool_examples[0].input], k=2, exclude=[None])
    assert result.ids[0][0] == pool_examples[0].id


@pytest.mark.parametrize("make", [lambda: BM25Retriever(), lambda: RandomRetriever()], ids=["bm25", "random"])
def test_k_larger_than_the_pool(pool_examples, make):
    retriever = make().index(pool_examples)
    result = retriever.retrieve(QUERIES[:2], k=50)
    assert all(sorted(row) == sorted(e.id for e in pool_examples) for row in result.ids)
    assert result.scores.shape == (2, 50)
    assert np.isnan(result.scores[:, len(pool_examples):]).all()
    excluded = retriever.retrieve([pool_examples[0].input], k=50, exclude=[pool_examples[0].id])
    assert len(excluded.ids[0]) == len(pool_examples) - 1 and pool_examples[0].id not in excluded.ids[0]


def test_retrieval_result_head_keeps_the_first_k_of_every_query(pool_examples):
    result = BM25Retriever().index(pool_examples).retrieve(QUERIES, k=4)
    head = result.head(2)
    assert isinstance(head, RetrievalResult)
    assert head.ids == [row[:2] for row in result.ids] and head.scores.shape == (3, 2)
    np.testing.assert_array_equal(head.scores, result.scores[:, :2])


def test_retrieval_result_from_rows_pads_short_rankings_and_missing_scores_with_nan():
    result = RetrievalResult.from_rows([["a", "b", "c"], ["d"]], [[3.0, None, 1.0], []])
    assert result.ids == [["a", "b", "c"], ["d"]] and result.scores.shape == (2, 3)
    assert result.scores[0, 0] == 3.0 and result.scores[0, 2] == 1.0
    assert np.isnan(result.scores[0, 1]) and np.isnan(result.scores[1]).all()
    with pytest.raises(ValueError, match="2 rankings for 1 rows"):
        RetrievalResult.from_rows([["a"], ["b"]], [[1.0]])
    with pytest.raises(ValueError, match="ranking 0: 2 scores for 1 ids"):
        RetrievalResult.from_rows([["a"]], [[1.0, 2.0]])


def test_retrieve_needs_an_index_and_positive_k(pool_examples):
    with pytest.raises(RuntimeError, match="no index"):
        BM25Retriever().retrieve(["x"], k=1)
    with pytest.raises(ValueError, match="k must be at least 1"):
        BM25Retriever().index(pool_examples).retrieve(["x"], k=0)


# --- persistence ----------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: BM25Retriever(), lambda: BM25Retriever(field="both", k1=1.2, b=0.5),
                                  lambda: RandomRetriever(seed=9)], ids=["bm25", "bm25-both", "random"])
def test_save_and_load_give_identical_results(tmp_path, pool_examples, make):
    retriever = make().index(pool_examples)
    retriever.save(tmp_path / "index")
    loaded = Retriever.load(tmp_path / "index")
    assert type(loaded) is type(retriever)
    assert loaded.config() == retriever.config()
    assert loaded.ids == retriever.ids
    assert_same_results(retriever.retrieve(QUERIES, k=4), loaded.retrieve(QUERIES, k=4))
    exclude = [e.id for e in pool_examples[:3]]
    assert_same_results(retriever.retrieve(QUERIES, k=4, exclude=exclude), loaded.retrieve(QUERIES, k=4, exclude=exclude))
    meta = json.loads((tmp_path / "index" / "meta.json").read_text(encoding="utf-8"))
    assert meta["retriever"] == retriever.name and "ids" not in meta  # the ids have files of their own
    assert IdList.load(tmp_path / "index") == retriever.ids == [e.id for e in pool_examples]
    mapped = Retriever.load(tmp_path / "index", mmap=True)
    assert isinstance(mapped.ids._offsets, np.memmap) and mapped.ids == retriever.ids
    # an index saved before: its ids in meta.json, no files of theirs
    for name in (IDS_FILE, IDS_OFFSETS_FILE):
        (tmp_path / "index" / name).unlink()
    (tmp_path / "index" / "meta.json").write_text(json.dumps({**meta, "ids": [e.id for e in pool_examples]}))
    assert_same_results(retriever.retrieve(QUERIES, k=4), Retriever.load(tmp_path / "index").retrieve(QUERIES, k=4))


def test_load_without_meta_json_fails_clearly(tmp_path, pool_examples):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no meta.json"):
        Retriever.load(tmp_path / "empty")
    # An interrupted save (index written, meta.json not yet) is refused the same way.
    BM25Retriever().index(pool_examples).save(tmp_path / "partial")
    (tmp_path / "partial" / "meta.json").unlink()
    with pytest.raises(FileNotFoundError, match="meta.json"):
        Retriever.load(tmp_path / "partial")


def test_load_refuses_an_unknown_retriever_or_the_wrong_class(tmp_path, pool_examples):
    RandomRetriever().index(pool_examples).save(tmp_path / "random")
    with pytest.raises(ValueError, match="holds a 'random' index, not bm25"):
        BM25Retriever.load(tmp_path / "random")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "meta.json").write_text(json.dumps({"retriever": "colbert", "ids": ["a"]}), encoding="utf-8")
    with pytest.raises(ValueError, match="unknown retriever 'colbert'"):
        Retriever.load(tmp_path / "odd")


# --- make_retriever -------------------------------------------------------------------------------


def test_make_retriever_specs(tmp_path, pool_examples):
    assert isinstance(make_retriever("random", seed=4), RandomRetriever)
    assert make_retriever("random", seed=4).seed == 4
    assert make_retriever("bm25").field == "input"
    assert make_retriever("bm25:output").field == "output"
    assert make_retriever("bm25:both").field == "both"
    sbert = make_retriever("sbert")
    assert isinstance(sbert, SBERTRetriever) and sbert.encoder_name == "minilm-l6"
    dense = make_retriever("dense:/some/encoder")
    assert type(dense) is DenseRetriever and dense.encoder_name == "/some/encoder"
    BM25Retriever(field="output").index(pool_examples).save(tmp_path / "saved")
    loaded = make_retriever(str(tmp_path / "saved"))
    assert isinstance(loaded, BM25Retriever) and loaded.field == "output" and loaded.ids == [e.id for e in pool_examples]


@pytest.mark.parametrize("spec", ["colbert", "bm26", "BM25", "/no/such/index"])
def test_make_retriever_rejects_unknown_names(spec):
    with pytest.raises(ValueError, match="unknown retriever"):
        make_retriever(spec)


def test_make_retriever_on_a_folder_that_is_not_an_index(tmp_path):
    with pytest.raises(FileNotFoundError, match="no meta.json"):
        make_retriever(str(tmp_path))


def test_make_retriever_rejects_unknown_bm25_field():
    with pytest.raises(ValueError, match="unknown field"):
        make_retriever("bm25:title")


def test_each_spec_keyword_has_its_builder():
    """``SPEC_KEYWORDS`` lives in ``retrieval.base`` (hybrid reads it without importing the package); the package's
    builders must cover exactly those keywords."""
    from taskret.retrieval import SPEC_BUILDERS, SPEC_PLUGINS
    from taskret.retrieval.base import SPEC_KEYWORDS

    assert sorted(SPEC_KEYWORDS) == sorted([*SPEC_BUILDERS, *SPEC_PLUGINS])
